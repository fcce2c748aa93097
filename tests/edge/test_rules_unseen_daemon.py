"""Issue 39 with the real daemons: a `strata edge` whose rules name a camera that never
sends a frame (a misspelt id, cameras given with --source) says so once its cameras are
known: an ERROR naming it with a guess, and strata_edge_rules_camera_unseen on /metrics.
A real `strata device` sends the one camera it runs (synthetic, paced)."""

from __future__ import annotations

import urllib.request
from pathlib import Path

import pytest
from edge_testkit import MODEL_SIZE
from strata.shared.loopback import free_port
from strata.tools.fleet import DeviceProc, EdgeProc, synthetic_source, wait_until

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]

RULES = """rules:
  unseen_camera_s: 3
  cameras:
    front-door:
      zones:
        - name: porch
          points: [[0, 0], [1, 0], [1, 1], [0, 1]]
"""


def unseen(port: int) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("strata_edge_rules_camera_unseen{"):
            camera = line.split('camera="', 1)[1].split('"', 1)[0]
            out[camera] = float(line.rsplit(" ", 1)[1])
    return out


def test_the_edge_reports_a_rules_camera_that_sends_no_frame(
    colour_model: Path, tmp_path: Path
) -> None:
    port = free_port()
    edge = EdgeProc(
        "e0",
        tmp_path,
        str(colour_model),
        MODEL_SIZE,
        extra=f"  metrics:\n    port: {port}\n" + RULES,
    )
    dev = DeviceProc(tmp_path, [edge.listen], {"frontdoor": synthetic_source(1, 4, 100000)})
    edge.start()
    try:
        dev.start()

        def said() -> bool:
            return "rules.cameras.front-door: refused" in edge.log.read_text()

        assert wait_until(said, 60), edge.log.read_text()[-3000:]
        log = edge.log.read_text()
        assert "did you mean 'frontdoor'?" in log and " ERROR " in log, log[-2000:]
        assert log.count("rules.cameras.front-door: refused") == 1  # once, not per frame
        assert wait_until(lambda: unseen(port) == {"front-door": 1.0}, 10), unseen(port)
    finally:
        if dev.proc is not None and dev.proc.poll() is None:
            dev.stop()
        edge.stop()
