"""Bad sinks in the real daemon: `strata cloud` (a subprocess) with a broker refusing its
password, a broker nobody listens for, a webhook that hangs and one that answers slowly,
beside a good broker login and a good webhook. Each bad one is a clear error line at start
(or at its first delivery) and a metric later, the daemon never crashes, and no bad sink
holds back a good one. An unreadable password file stops the start with one line."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from outbox_helpers import Broker, Receiver, Subscriber, daemon_config, send, wait_for
from strata.shared.loopback import free_port
from strata.tools.demo.scrape import scrape
from test_cloud_cli import wait_serving

STRATA = [sys.executable, "-m", "strata.tools.cli"]

pytestmark = [pytest.mark.slow, pytest.mark.timeout(150)]


def test_bad_sinks_are_clear_errors_and_metrics_and_hold_back_no_good_one(
    tmp_path: Path, colour_model: tuple[Path, Path]
) -> None:
    broker = Broker(tmp_path / "mqtt", users={"strata": "right"}).start()
    right, wrong = tmp_path / "right.txt", tmp_path / "wrong.txt"
    right.write_text("right\n")
    wrong.write_text("nope\n")
    nobody = free_port()  # nothing listens there
    hangs, slow, fine = Receiver(delay_s=30.0), Receiver(delay_s=0.3), Receiver()
    address = f"127.0.0.1:{free_port()}"
    metrics_port = free_port()
    cfg = daemon_config(
        tmp_path,
        colour_model,
        address,
        f"""    mqtt:
      - {{name: locked, port: {broker.port}, username: strata, password_file: "{wrong}"}}
      - {{name: nobody, port: {nobody}}}
      - {{name: good, port: {broker.port}, username: strata, password_file: "{right}"}}
    webhooks:
      - {{name: hangs, url: "{hangs.url}", timeout_s: 1, attempts: 1, cooldown_s: 0}}
      - {{name: slow, url: "{slow.url}", cooldown_s: 0}}
      - {{name: fine, url: "{fine.url}", cooldown_s: 0}}
""",
        metrics_port,
    )
    log = tmp_path / "cloud.log"
    proc = subprocess.Popen(
        [*STRATA, "cloud", "--config", str(cfg)],
        stdout=subprocess.DEVNULL,
        stderr=log.open("a"),
        text=True,
    )
    sub: Subscriber | None = None
    try:
        wait_serving(address, proc)
        # At start: one clear line for each broker that cannot be used.
        lines = log.read_text().splitlines()
        locked = [x for x in lines if "sink locked" in x and "ERROR" in x]
        assert len(locked) == 1 and "refused the connection" in locked[0], lines
        assert "not authorized" in locked[0].lower() or "password" in locked[0].lower()
        gone = [x for x in lines if "sink nobody" in x and "ERROR" in x]
        assert len(gone) == 1 and f"cannot reach MQTT broker 127.0.0.1:{nobody}" in gone[0]
        assert not any("Traceback" in x for x in lines), lines

        sub = Subscriber(broker.port, ["strata/events"], login=("strata", "right"))
        t0 = time.monotonic()
        send(address, 0, 20)
        # The good ones get everything at once, whatever the bad ones do.
        wait_for(lambda: len(fine.posts) == 20, 15, "the good webhook")
        good = sub
        wait_for(lambda: len(good.on("strata/events")) >= 20, 15, "the good broker login")
        assert time.monotonic() - t0 < 15.0
        wait_for(lambda: len(slow.posts) == 20, 30, "the slow webhook, in the end")

        def metric(name: str, **labels: str) -> float:
            got = scrape(f"http://127.0.0.1:{metrics_port}/metrics", timeout=2.0)
            return got.total(name, **labels) if got is not None else -1.0

        failed = "strata_cloud_sink_failed_total"
        wait_for(lambda: metric(failed, sink="hangs", reason="timeout") >= 1, 20, "a timeout")
        assert metric(failed, sink="locked", reason="auth") >= 1
        assert metric(failed, sink="nobody", reason="unreachable") >= 1
        for bad in ("locked", "nobody"):
            assert metric("strata_cloud_sink_connected", sink=bad) == 0, bad
            wait_for(
                lambda bad=bad: metric("strata_cloud_sink_backlog", sink=bad) == 20,
                20,
                f"the backlog of {bad}",
            )
        assert metric("strata_cloud_sink_connected", sink="good") == 1
        assert metric("strata_cloud_sink_delivered_total", sink="fine") == 20
        assert proc.poll() is None, "the cloud exited"
    finally:
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(60)
        if sub is not None:
            sub.close()
        broker.stop()
        for rx in (hangs, slow, fine):
            rx.close()
    assert rc == 0
    assert "Traceback" not in log.read_text()


def test_an_unreadable_password_file_stops_the_start_with_one_line(
    tmp_path: Path, colour_model: tuple[Path, Path]
) -> None:
    address = f"127.0.0.1:{free_port()}"
    missing = tmp_path / "no-such-password.txt"
    cfg = daemon_config(
        tmp_path,
        colour_model,
        address,
        f"""    mqtt:
      - {{name: locked, username: strata, password_file: "{missing}"}}
""",
    )
    done = subprocess.run(
        [*STRATA, "cloud", "--config", str(cfg)], capture_output=True, text=True, timeout=90
    )
    assert done.returncode == 2, done.stderr
    assert f"sink locked: cannot read password_file {missing}" in done.stderr
    assert "Traceback" not in done.stderr
