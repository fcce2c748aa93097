"""`strata config check` (issue 39): rules for a camera the site does not run are refused
whenever the camera list is known (device.cameras, or --camera for --source cameras), with
a guess; a misspelt key gets "did you mean"; without a list the rules' cameras are said to
be unchecked. Run as the installed CLI in a process of its own."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

RULES = """rules:
  cameras:
    front-door:
      zones:
        - name: porch
          points: [[0, 0], [1, 0], [1, 1], [0, 1]]
"""


def check(tmp: Path, text: str, *extra: str) -> subprocess.CompletedProcess[str]:
    path = tmp / "strata.yaml"
    path.write_text(text)
    return subprocess.run(
        [sys.executable, "-m", "strata.tools.cli", "config", "check", str(path), *extra],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_rules_for_a_camera_not_given_with_camera_are_refused_with_a_guess(
    tmp_path: Path,
) -> None:
    # The README's multi-host shape: no device.cameras, cameras come with --source.
    got = check(tmp_path, RULES, "--camera", "frontdoor", "--camera", "garage")
    assert got.returncode == 2, got
    assert "rules.cameras.front-door" in got.stderr
    assert "device.cameras or --camera does not list" in got.stderr
    assert "did you mean 'frontdoor'" in got.stderr
    ok = check(tmp_path, RULES, "--camera", "front-door")
    assert ok.returncode == 0 and "all known" in ok.stdout, ok


def test_device_cameras_are_a_camera_list_too(tmp_path: Path) -> None:
    text = RULES + "device:\n  cameras:\n    - {id: garage, source: 'rtsp://x/1'}\n"
    got = check(tmp_path, text)
    assert got.returncode == 2 and "rules" in got.stderr and "front-door" in got.stderr, got
    # As every daemon loading the file refuses it: --camera does not widen device.cameras.
    assert check(tmp_path, text, "--camera", "front-door").returncode == 2


def test_without_a_camera_list_the_rules_cameras_are_said_unchecked(tmp_path: Path) -> None:
    got = check(tmp_path, RULES)
    assert got.returncode == 0, got
    assert "front-door, not checked: no camera list" in got.stdout


def test_a_misspelt_key_is_refused_with_did_you_mean(tmp_path: Path) -> None:
    got = check(tmp_path, "edge:\n  batching:\n    max_bach: 4\n")
    assert got.returncode == 2, got
    assert "did you mean" in got.stderr and "max_batch" in got.stderr
