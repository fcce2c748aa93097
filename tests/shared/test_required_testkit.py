"""A tool the tests need: skipped with the reason locally, a failure with CI set; and
.ci/system-deps fails, saying what and why, when it cannot install what the tests need."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

NEEDS_A_MISSING_TOOL = """
from required_testkit import require_tool

def test_needs_it():
    require_tool("strata-no-such-tool", "apt-get install strata-no-such-tool")
"""


def run_pytest(tmp_path: Path, ci: str | None) -> subprocess.CompletedProcess[str]:
    test = tmp_path / "test_needs_tool.py"
    test.write_text(NEEDS_A_MISSING_TOOL)
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["PYTHONPATH"] = str(ROOT / "tests")
    if ci is not None:
        env["CI"] = ci
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-ra", "-p", "no:cacheprovider", str(test)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("ci", [None, "false", "0"])
def test_a_missing_tool_skips_with_its_reason_outside_ci(tmp_path: Path, ci: str | None) -> None:
    out = run_pytest(tmp_path, ci)
    assert out.returncode == 0 and "1 skipped" in out.stdout, out.stdout
    # -ra lists the skip with the reason.
    assert "SKIPPED" in out.stdout and "apt-get install strata-no-such-tool" in out.stdout


@pytest.mark.parametrize("ci", ["true", "1"])
def test_a_missing_tool_fails_the_run_in_ci(tmp_path: Path, ci: str) -> None:
    out = run_pytest(tmp_path, ci)
    assert out.returncode == 1 and "1 failed" in out.stdout, out.stdout
    assert "CI: strata-no-such-tool not found: apt-get install" in out.stdout


def test_system_deps_fails_with_the_reason_when_it_cannot_install(tmp_path: Path) -> None:
    # A machine without dpkg and apt-get: every package is missing and none can be installed.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("bash", "id", "grep", "mktemp", "tail", "rm", "cat"):
        found = shutil.which(name)
        assert found is not None, name
        (bin_dir / name).symlink_to(found)
    out = subprocess.run(
        [str(bin_dir / "bash"), str(ROOT / ".ci" / "system-deps")],
        env={"PATH": str(bin_dir)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode != 0, out.stderr
    line = out.stderr.strip().splitlines()[-1]
    assert line.startswith("system-deps: cannot install"), out.stderr
    for pkg in ("gir1.2-gst-rtsp-server-1.0", "prometheus", "postgresql", "mosquitto", "chromium"):
        assert pkg in line, line
