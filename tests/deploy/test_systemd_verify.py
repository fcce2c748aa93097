"""Every unit in deploy/systemd through `systemd-analyze verify`.

systemd ignores a misspelt key or a bad sandboxing value with a warning and starts the
service anyway, less protected; verify prints those warnings, so any output is a failure.
The units run in a temporary root that has the distribution's own units (for the targets
they order against) and stand-ins for the programs they execute.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
from deploy_kit import DEPLOY, tool
from required_testkit import missing

UNITS = sorted((DEPLOY / "systemd").glob("*.service"))
SYSTEM_UNITS = Path("/usr/lib/systemd/system")
EXEC_KEYS = ("ExecStart", "ExecStartPre", "ExecStartPost", "ExecReload", "ExecStop", "ExecStopPost")


def executables(unit: Path) -> list[str]:
    """Absolute program paths the unit's Exec* lines run (prefixes like `-` or `+` dropped)."""
    out = []
    for line in unit.read_text().splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() in EXEC_KEYS and value.strip():
            program = shlex.split(value.strip())[0].lstrip("-@:+!")
            out.append(program)
    return out


def fake_root(tmp: Path, unit: Path) -> Path:
    """A root with the system's units, the unit under test and its programs as stand-ins."""
    root = tmp / "root"
    shutil.copytree(SYSTEM_UNITS, root / "usr/lib/systemd/system", symlinks=True)
    etc = root / "etc/systemd/system"
    etc.mkdir(parents=True)
    shutil.copy(unit, etc / unit.name)
    for program in executables(unit):
        assert program.startswith("/"), f"{unit.name}: {program} is not an absolute path"
        stand_in = root / program.lstrip("/")
        stand_in.parent.mkdir(parents=True, exist_ok=True)
        stand_in.write_text("#!/bin/sh\nexit 0\n")
        stand_in.chmod(0o755)
    return root


def verify(unit: Path, tmp: Path) -> str:
    """systemd-analyze verify's output for `unit` (a template is checked as one instance)."""
    analyze = tool("systemd-analyze")
    if not SYSTEM_UNITS.is_dir():
        missing(f"{SYSTEM_UNITS} missing: apt-get install systemd")
    root = fake_root(tmp, unit)
    name = unit.name.replace("@.", "@check.")
    out = subprocess.run(
        [analyze, "verify", "--man=no", f"--root={root}", str(root / "etc/systemd/system" / name)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return (out.stdout + out.stderr).strip() + (
        "" if out.returncode == 0 else f"\nexit {out.returncode}"
    )


def test_there_are_units() -> None:
    assert {u.name for u in UNITS} >= {f"strata-{t}.service" for t in ("device", "edge", "cloud")}


@pytest.mark.parametrize("unit", UNITS, ids=[u.name for u in UNITS])
def test_unit_verifies_without_a_warning(unit: Path, tmp_path: Path) -> None:
    output = verify(unit, tmp_path)
    assert output == "", f"systemd-analyze verify {unit.name}:\n{output}"


def test_a_bad_directive_is_caught(tmp_path: Path) -> None:
    """The check itself: a misspelt key and a bad sandboxing value make verify speak."""
    good = DEPLOY / "systemd" / "strata-cloud.service"
    bad = tmp_path / "src" / "strata-cloud.service"
    bad.parent.mkdir()
    bad.write_text(
        good.read_text()
        .replace("ProtectHome=yes", "ProtectHome=yess")
        .replace("PrivateTmp=yes", "PrivateTemp=yes")
    )
    output = verify(bad, tmp_path)
    assert "yess" in output and "PrivateTemp" in output, output
