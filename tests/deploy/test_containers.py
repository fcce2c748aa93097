"""The Containerfiles, checked without building them (no image builder on these machines):
what they copy exists and makes a complete wheel, the image runs as a non-root user with the
uid the Kubernetes pods expect, and its entrypoint is a real `strata` subcommand whose
default arguments parse."""

from __future__ import annotations

import argparse
import glob
import json
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from deploy_kit import DEPLOY, ROOT, pod_templates, render_kustomization

CONTAINERFILES = sorted((DEPLOY / "containers").glob("*.Containerfile"))
INSTRUCTIONS = {
    "FROM", "RUN", "COPY", "ADD", "WORKDIR", "ENV", "ARG", "USER", "EXPOSE", "ENTRYPOINT",
    "CMD", "LABEL", "HEALTHCHECK", "VOLUME", "STOPSIGNAL", "SHELL", "ONBUILD",
}  # fmt: skip


@dataclass
class Stage:
    """One FROM ... section of a Containerfile."""

    image: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def last(self, word: str) -> str | None:
        values = [rest for w, rest in self.instructions if w == word]
        return values[-1] if values else None


def parse(path: Path) -> list[Stage]:
    """The stages of a Containerfile, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", path.read_text())
    stages: list[Stage] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        word, _, rest = line.partition(" ")
        word, rest = word.upper(), rest.strip()
        assert word in INSTRUCTIONS, f"{path.name}: unknown instruction {word}"
        if word == "FROM":
            parts = rest.split()
            name = parts[2] if len(parts) == 3 and parts[1].upper() == "AS" else None
            stages.append(Stage(parts[0], name))
            continue
        assert stages, f"{path.name}: {word} before FROM"
        stages[-1].instructions.append((word, rest))
    return stages


def copy_args(rest: str) -> tuple[dict[str, str], list[str], str]:
    """(--flags, sources, destination) of a COPY/ADD in shell or JSON form."""
    argv = json.loads(rest) if rest.startswith("[") else shlex.split(rest)
    flags = dict(a[2:].partition("=")[::2] for a in argv if a.startswith("--"))
    paths = [a for a in argv if not a.startswith("--")]
    return flags, paths[:-1], paths[-1]


def exec_form(rest: str | None, what: str, path: Path) -> list[str]:
    assert rest is not None, f"{path.name}: no {what}"
    argv = json.loads(rest)  # shell form would wrap the daemon in /bin/sh: no signals
    assert isinstance(argv, list), f"{path.name}: {what} must be in exec (JSON) form"
    return [str(a) for a in argv]


def subcommands() -> dict[str, argparse.ArgumentParser]:
    from strata.tools.cli import build_parser

    for action in build_parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    raise AssertionError("strata has no subcommands")


def test_there_is_a_containerfile_per_tier() -> None:
    assert {p.name for p in CONTAINERFILES} >= {
        f"{t}.Containerfile" for t in ("device", "edge", "cloud")
    }


@pytest.mark.parametrize("path", CONTAINERFILES, ids=[p.stem for p in CONTAINERFILES])
def test_what_is_copied_exists_and_builds_a_complete_wheel(path: Path) -> None:
    stages = parse(path)
    names = [s.name for s in stages]
    copied: set[str] = set()
    for i, stage in enumerate(stages):
        assert ":" in stage.image or "@" in stage.image, f"{path.name}: pin {stage.image}"
        for word, rest in stage.instructions:
            if word not in {"COPY", "ADD"}:
                continue
            flags, sources, _dest = copy_args(rest)
            if "from" in flags:
                assert flags["from"] in names[:i], f"{path.name}: no earlier stage {flags['from']}"
                continue
            for src in sources:
                # The build context is the repository root (see the header of each file).
                assert glob.glob(str(ROOT / src)), f"{path.name}: COPY source {src} missing"
                copied.add(src.rstrip("/").removeprefix("./"))
    # `pip wheel .` in the build stage needs everything pyproject.toml points at.
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    needed = {"pyproject.toml", project["project"]["readme"]}
    needed |= set(project["tool"]["setuptools"]["package-dir"].values())
    assert needed <= copied, f"{path.name}: the wheel needs {sorted(needed - copied)} copied"


@pytest.mark.parametrize("path", CONTAINERFILES, ids=[p.stem for p in CONTAINERFILES])
def test_the_image_runs_as_the_non_root_user_the_pods_expect(path: Path) -> None:
    final = parse(path)[-1]
    user = final.last("USER")
    assert user is not None, f"{path.name}: no USER, the image would run as root"
    uid = user.split(":")[0]
    assert uid not in {"root", "0"}, f"{path.name}: runs as root"
    # Kubernetes' runAsNonRoot can only verify a numeric USER.
    assert uid.isdigit(), f"{path.name}: USER {user} is not numeric"
    # The pods that run this image (other images, a database say, have their own users).
    image = f"strata-{path.name.split('.')[0]}"
    uids = set()
    for _w, template in pod_templates(render_kustomization()):
        pod_uid = template["spec"].get("securityContext", {}).get("runAsUser")
        for c in template["spec"]["containers"]:
            run_as = c.get("securityContext", {}).get("runAsUser", pod_uid)
            if c["image"].rsplit("/", 1)[-1].split(":")[0] == image and run_as is not None:
                uids.add(str(run_as))
    assert uids <= {uid}, f"{path.name}: USER {uid}, its pods run as {sorted(uids)}"


@pytest.mark.parametrize("path", CONTAINERFILES, ids=[p.stem for p in CONTAINERFILES])
def test_the_entrypoint_is_a_strata_subcommand(path: Path) -> None:
    final = parse(path)[-1]
    entry = exec_form(final.last("ENTRYPOINT"), "ENTRYPOINT", path)
    cmd = exec_form(final.last("CMD"), "CMD", path)
    assert entry[0] == "strata", f"{path.name}: entrypoint {entry}"
    tier = path.name.split(".")[0]
    assert entry[1:] == [tier], f"{path.name}: runs {entry}, not `strata {tier}`"
    parser = subcommands().get(tier)
    assert parser is not None, f"`strata {tier}` is not a subcommand"
    try:
        parser.parse_args(cmd)
    except SystemExit:
        pytest.fail(f"{path.name}: `strata {tier} {' '.join(cmd)}` does not parse")
    # `strata` must be on PATH: a venv made in the final stage needs its bin/ on PATH.
    for word, rest in final.instructions:
        if word == "RUN" and (venv := re.search(r"-m venv (\S+)", rest)):
            env = " ".join(r for w, r in final.instructions if w == "ENV")
            assert f"{venv.group(1)}/bin" in env, f"{path.name}: {venv.group(1)}/bin not on PATH"


@pytest.mark.parametrize("path", CONTAINERFILES, ids=[p.stem for p in CONTAINERFILES])
def test_the_image_exposes_its_metrics_port(path: Path) -> None:
    from strata.shared.config import load_config

    tier = path.name.split(".")[0]
    example = load_config(DEPLOY / "config" / "strata.yaml")
    exposed = {
        int(p.split("/")[0])
        for w, r in parse(path)[-1].instructions
        if w == "EXPOSE"
        for p in r.split()
    }
    assert getattr(example, tier).metrics.port in exposed


def build_context(stage: Stage, into: Path) -> Path:
    """The files a stage copies from the build context, laid out as the stage sees them."""
    workdir = into
    for word, rest in stage.instructions:
        if word == "WORKDIR":
            workdir = into / rest.lstrip("/")
            workdir.mkdir(parents=True, exist_ok=True)
        if word not in {"COPY", "ADD"}:
            continue
        flags, sources, dest = copy_args(rest)
        if "from" in flags:
            continue
        target = (workdir / dest) if not dest.startswith("/") else into / dest.lstrip("/")
        for src in sources:
            for match in glob.glob(str(ROOT / src)):
                path = Path(match)
                if path.is_dir():  # COPY dir dest copies the directory's contents
                    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
                    shutil.copytree(path, target, dirs_exist_ok=True, ignore=ignore)
                else:
                    into_dir = dest.endswith("/") or len(sources) > 1
                    out = target / path.name if into_dir else target
                    out.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy(path, out)
    return workdir


def wheel_stage(path: Path) -> Stage:
    """The stage that runs `pip wheel`."""
    for stage in parse(path):
        if any(w == "RUN" and "pip wheel" in r for w, r in stage.instructions):
            return stage
    raise AssertionError(f"{path.name}: no stage runs `pip wheel`")


# The Containerfiles share their build stage: build each distinct one once.
WHEEL_BUILDS = {repr(wheel_stage(p).instructions): p for p in reversed(CONTAINERFILES)}


@pytest.mark.slow
@pytest.mark.parametrize("path", sorted(WHEEL_BUILDS.values()), ids=lambda p: p.stem)
def test_the_build_stage_makes_a_wheel_with_the_cli(path: Path, tmp_path: Path) -> None:
    """`pip wheel .` on exactly what the build stage copies (offline: no build isolation)."""
    build = wheel_stage(path)
    src = build_context(build, tmp_path / "ctx")
    out = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
         "--wheel-dir", str(tmp_path / "wheels"), str(src)],
        capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    (wheel,) = (tmp_path / "wheels").glob("strata-*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
        assert "strata = strata.tools.cli:main" in z.read(entry_points).decode()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    for package in project["tool"]["setuptools"]["packages"]:
        folder = package.replace(".", "/")
        assert any(n.startswith(folder + "/") for n in names), f"{package} not in the wheel"
