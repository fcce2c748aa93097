"""Strict config models and a YAML loader whose errors name the file, line and key path."""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Iterable
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError


class StrictModel(BaseModel):
    """Base of every config section: unknown keys are errors, values are frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)


class ConfigError(ValueError):
    """A config file that cannot be read or does not validate."""


class KeyValueError(ValueError):
    """A validator's error about a key below the model it validates: `path` (keys and list
    indices) is appended to the error's location, so the message names that key's line."""

    def __init__(self, path: tuple[str | int, ...], message: str) -> None:
        super().__init__(message)
        self.path = path


M = TypeVar("M", bound=BaseModel)
_Path = tuple[str | int, ...]


def _key_lines_into(node: yaml.Node, path: _Path, out: dict[_Path, int]) -> None:
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            child = (*path, str(key.value))
            out[child] = key.start_mark.line + 1
            _key_lines_into(value, child, out)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            out[(*path, i)] = item.start_mark.line + 1
            _key_lines_into(item, (*path, i), out)


def _line_for(lines: dict[_Path, int], loc: _Path) -> int | None:
    # The deepest prefix of the error's location that exists in the file.
    for end in range(len(loc), -1, -1):
        if loc[:end] in lines:
            return lines[loc[:end]]
    return None


def load_yaml_model(model: type[M], path: str | Path, overrides: dict[str, Any] | None = None) -> M:
    """Validate a YAML file against `model`; raise ConfigError naming every bad key and line."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read config: {exc.strerror}") from exc
    try:
        data = yaml.safe_load(text) or {}
        root = yaml.compose(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of sections")
    lines: dict[_Path, int] = {}
    if root is not None:
        _key_lines_into(root, (), lines)
    return validate_model(model, merge(data, overrides or {}), source=str(path), lines=lines)


def validate_model(
    model: type[M],
    data: dict[str, Any],
    source: str = "<config>",
    lines: dict[_Path, int] | None = None,
) -> M:
    """Validate a dict; errors read `file:line: a.b.c: message`."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        msgs = []
        for err in exc.errors():
            loc = tuple(err["loc"])
            cause = (err.get("ctx") or {}).get("error")
            if isinstance(cause, KeyValueError):
                loc = (*loc, *cause.path)
            line = _line_for(lines or {}, loc)
            where = f"{source}:{line}" if line else source
            key = ".".join(str(p) for p in loc) or "<root>"
            msg = _unknown_key(model, loc) if err["type"] == "extra_forbidden" else err["msg"]
            msgs.append(f"{where}: {key}: {msg}")
        raise ConfigError("invalid config:\n  " + "\n  ".join(msgs)) from None


def _unknown_key(model: type[BaseModel], loc: _Path) -> str:
    """'unknown key', with the closest field name at that level when one is close."""
    section = _section_at(model, loc[:-1])
    if section is None or not loc or not isinstance(loc[-1], str):
        return "unknown key"
    guess = closest(loc[-1], section.model_fields)
    return f"unknown key; did you mean {guess}?" if guess else "unknown key"


def closest(word: str, choices: Iterable[str]) -> str:
    """The choice `word` most likely misspells (difflib), or "" when none is close."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return close[0] if close else ""


def _section_at(model: type[BaseModel], path: _Path) -> type[BaseModel] | None:
    """The model that holds the keys at `path` below `model` (through lists and dicts)."""
    annotation: Any = model
    for part in path:
        section = _model_in(annotation)
        if isinstance(part, str) and section is not None and part in section.model_fields:
            annotation = section.model_fields[part].annotation
        else:  # a list index or a dict key: the item's type
            args = [a for a in typing.get_args(annotation) if a is not type(None)]
            if typing.get_origin(annotation) not in (list, tuple, dict) or not args:
                return None
            annotation = args[-1]
    return _model_in(annotation)


def _model_in(annotation: Any) -> type[BaseModel] | None:
    # A section, or the one section in an optional (X | None).
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        models = [m for a in typing.get_args(annotation) if (m := _model_in(a)) is not None]
        return models[0] if len(models) == 1 else None
    return None


def merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """`extra` deep-merged over `base` (neither is modified)."""
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out
