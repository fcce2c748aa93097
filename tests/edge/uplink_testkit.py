"""Helpers of the edge Uplink tests (track events, snapshots): the real cloud service on a
loopback port, an Uplink to it with short timeouts, a bounded wait, and an edge process
killed -9 mid-flow."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from strata.edge.metrics import EdgeMetrics
from strata.edge.uplink.stream import Uplink
from strata.shared.config.edge import UplinkConfig
from strata.shared.contracts import analytics_pb2

_CLOUD_TESTS = str(Path(__file__).resolve().parents[1] / "cloud")
if _CLOUD_TESTS not in sys.path:
    sys.path.append(_CLOUD_TESTS)

from cloud_helpers import make_config  # noqa: E402
from strata.cloud.server import CloudServer  # noqa: E402


def clouds(model: Path, labels: Path, db: Path, port: int) -> Iterator[Callable[..., CloudServer]]:
    """For a fixture to yield from: starts the real cloud service on `port` over one SQLite
    store (again after a stop; keyword arguments go to make_config); every one still running
    is stopped at the end."""
    running: list[CloudServer] = []

    def start(**extra: Any) -> CloudServer:
        cfg = make_config(model, db, labels, listen=f"127.0.0.1:{port}", **extra)
        server = CloudServer(cfg)
        server.start()
        running.append(server)
        return server

    yield start
    for server in running:
        server.stop(0.5)


def make(port: int, tmp_path: Path | None = None, **over: Any) -> tuple[Uplink, EdgeMetrics]:
    """A started Uplink to the cloud on `port` (spooled under tmp_path when given), with short
    timeouts; `over` overrides its config."""
    metrics = EdgeMetrics()
    spool = str(tmp_path / "spool.sqlite") if tmp_path is not None else ""
    cfg = UplinkConfig.model_validate(
        {
            "connect_timeout_s": 0.2,
            "open_s": 0.3,
            "failure_threshold": 2,
            "spool_path": spool,
            **over,
        }
    )
    up = Uplink(f"127.0.0.1:{port}", cfg, metrics)
    up.start()
    return up, metrics


def wait_for(cond: Callable[[], bool], timeout_s: float = 30.0) -> bool:
    """Whether `cond` came true within timeout_s (polled every 50 ms)."""
    deadline = time.monotonic() + timeout_s
    while not cond() and time.monotonic() < deadline:
        time.sleep(0.05)
    return cond()


def held_for(count: Callable[[], int], quiet_s: float = 1.0, timeout_s: float = 15.0) -> int:
    """`count()` once it has not changed for quiet_s (asserted within timeout_s): a stream
    that a kill cut may still have messages in the server's hands, stored after it died."""
    deadline = time.monotonic() + timeout_s
    last, since = count(), time.monotonic()
    while time.monotonic() - since < quiet_s:
        assert time.monotonic() < deadline, f"still changing after {timeout_s} s: {last}"
        time.sleep(0.1)
        now = count()
        if now != last:
            last, since = now, time.monotonic()
    return last


# The child: offers the items of a batch file through a spooled Uplink, `step` at a time,
# waits, then dies by SIGKILL (no stop, nothing flushed or parked).
_KILLED_EDGE = """
import json, os, signal, sys, time
from strata.edge.metrics import EdgeMetrics
from strata.edge.uplink.stream import Uplink
from strata.shared.config.edge import UplinkConfig
from strata.shared.contracts import analytics_pb2

batch_file, spool, target, what, step, pause_s, uplink = sys.argv[1:8]
batch = analytics_pb2.CropBatch.FromString(open(batch_file, "rb").read())
items, n = list(getattr(batch, what)), int(step)
cfg = UplinkConfig.model_validate({"spool_path": spool, **json.loads(uplink)})
up = Uplink(target, cfg, EdgeMetrics())
up.start()
offer = getattr(up, "offer_" + what)
for i in range(0, len(items), n):
    offer(items[i : i + n])
time.sleep(float(pause_s))
os.kill(os.getpid(), signal.SIGKILL)
"""


@dataclass(frozen=True, slots=True)
class KilledEdge:
    """An edge process that offers a CropBatch's `what` ("events" or "snapshots") through a
    spooled Uplink, `step` at a time, waits `pause_s`, then dies by SIGKILL."""

    what: str
    step: int
    pause_s: float
    uplink: dict[str, Any]  # UplinkConfig keys beside spool_path

    def run(self, batch: analytics_pb2.CropBatch, tmp_path: Path, port: int) -> Path:
        """Run it to its death (asserted) against the cloud on `port`; the spool it left."""
        batch_file = tmp_path / f"{self.what}.bin"
        batch_file.write_bytes(batch.SerializeToString())
        spool = tmp_path / "spool.sqlite"
        args = [str(batch_file), str(spool), f"127.0.0.1:{port}", self.what, str(self.step)]
        child = subprocess.run(
            [sys.executable, "-c", _KILLED_EDGE, *args, str(self.pause_s), json.dumps(self.uplink)],
            capture_output=True,
            timeout=60,
        )
        assert child.returncode == -9, child.stderr.decode()
        return spool
