"""What may be shipped: text with no absolute path of the machine that wrote it.

Manifests, model cards and distill.json travel with a model; a path such as
/home/alice/runs/last.pt tells another machine nothing and leaks the builder's layout.
Each absolute path is cut to its last component (the file or folder name).
"""

from __future__ import annotations

import re
from typing import Any

# A slash that starts a path: not inside a word, a relative path or a URL (`https://`).
_ABSOLUTE = re.compile(r"(?<![\w:/.~-])/(?=[A-Za-z_.])(?:[^\s/\"'`]+/)*([^\s/\"'`]+)")


def portable_text(text: str) -> str:
    """`text` with every absolute path replaced by its last component."""
    return _ABSOLUTE.sub(r"\1", text)


def portable(value: Any) -> Any:
    """The same structure (dicts, lists, tuples, strings) with portable strings."""
    if isinstance(value, str):
        return portable_text(value)
    if isinstance(value, dict):
        return {k: portable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(portable(v) for v in value)
    return value


def absolute_paths(text: str) -> list[str]:
    """The absolute paths in `text` (for tests and checks)."""
    return [m.group(0) for m in _ABSOLUTE.finditer(text)]
