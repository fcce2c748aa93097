"""Faults with the real processes: `strata cloud` (a subprocess) delivering to a real
mosquitto and a real HTTP receiver, the broker stopped and restarted, the receiver answering
500 for a while, and the cloud killed -9 mid-delivery: every stored event arrives at both,
duplicates only under the same idempotency key, order per camera kept."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from outbox_helpers import Broker, Receiver, Subscriber, daemon_config, send, wait_for
from strata.shared.loopback import free_port
from test_cloud_cli import wait_serving

STRATA = [sys.executable, "-m", "strata.tools.cli"]


def unique_in_order(items: list[Any], key: str) -> None:
    """Every duplicate is the same event (same key), and first arrivals keep store order."""
    seen: dict[int, str] = {}
    firsts: list[int] = []
    for e in items:
        sid, k = e["strata"]["stored_id"], e["strata"]["idempotency_key"]
        if sid not in seen:
            firsts.append(sid)
        assert seen.setdefault(sid, k) == k
    assert firsts == sorted(firsts), key


@pytest.mark.slow
def test_outage_500s_and_kill_9_lose_nothing(
    tmp_path: Path, colour_model: tuple[Path, Path]
) -> None:
    broker = Broker(tmp_path / "mqtt", persistent=True).start()
    sub = Subscriber(broker.port, ["strata/events"], client_id="ha", persistent=True)
    failing_until = [time.monotonic() + 1e6]
    rx = Receiver(answer=lambda _n: 500 if time.monotonic() < failing_until[0] else 200)
    address = f"127.0.0.1:{free_port()}"
    sinks = f"""    lease_s: 3
    mqtt: [{{port: {broker.port}, keepalive_s: 5}}]
    webhooks: [{{url: "{rx.url}", cooldown_s: 0, backoff_s: 0.1, max_backoff_s: 0.5}}]"""
    cfg = daemon_config(tmp_path, colour_model, address, sinks)

    def cloud() -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            [*STRATA, "cloud", "--config", str(cfg)],
            stdout=subprocess.DEVNULL,
            stderr=(tmp_path / "cloud.log").open("a"),
            text=True,
        )
        wait_serving(address, proc)
        return proc

    proc = cloud()
    try:
        send(address, 0, 10)
        wait_for(lambda: len(sub.on("strata/events")) >= 10, 30, "MQTT before the outage")
        broker.stop()
        send(address, 10, 10)  # stored while the broker is down and the receiver fails
        time.sleep(1.0)
        broker.start()
        proc.send_signal(signal.SIGKILL)  # mid-delivery: leases and positions stay behind
        proc.wait(10)
        failing_until[0] = time.monotonic() + 2.0
        proc = cloud()
        send(address, 20, 10)
        wait_for(lambda: len({e["strata"]["stored_id"] for e in sub.events("strata/events")})
                 >= 30, 60, "all 30 events on MQTT")  # fmt: skip
        wait_for(lambda: len({b["strata"]["stored_id"] for b in rx.bodies()}) >= 30, 60,
                 "all 30 events at the webhook")  # fmt: skip
    finally:
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(30)
        sub.close()
        broker.stop()
        rx.close()
    assert rc == 0
    for name, got in (("mqtt", sub.events("strata/events")), ("webhook", rx.bodies())):
        assert {e["strata"]["stored_id"] for e in got} == set(range(1, 31)), name
        for cam in ("cam-0", "cam-1"):
            unique_in_order([e for e in got if e["strata"]["camera_id"] == cam], f"{name} {cam}")
