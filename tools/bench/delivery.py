"""Events to MQTT and a webhook through faults: `strata bench delivery` (issue 23).

The three real daemons on vtest at the demo's rate (one camera paced at the clip's 10 fps,
looped; the demo's config) with rules (a line and a zone) so track events flow beside the
classified crops; the cloud's outbox delivers to a real mosquitto the bench starts and to
a webhook endpoint in the bench that records every POST. Phases, in order:

    warm         all well, `--warm-s`
    broker_down  mosquitto stopped for `--broker-down-s` (SIGTERM; it keeps its sessions)
    cloud_kill   the broker back; at the first event the subscriber gets after it (the
                 backlog being delivered), kill -9 of the cloud; restarted after
                 `--cloud-down-s` over the same store
    webhook_500  the webhook answers 500 for `--webhook-500-s`, and on until it has refused
                 a POST (at most `--kill-wait-s` more)
    calm         all well again, `--calm-s`
    drain        the device stops; wait until the store stands still and both receivers
                 have every stored event (`--drain-timeout-s` at most)

Checked at the end, per receiver, against the store (delivery_check.py): events lost (must
be 0), duplicates (allowed only under the event's own idempotency key), events first
arriving out of store order per camera (must be 0). Measured: capture -> broker latency
(the event's capture_ns to its first receipt at the MQTT subscriber), p50 and p99 over the
events captured and delivered while all was well (warm and calm), and over every event.

    strata bench delivery --out bench-out/delivery     # ~20 minutes with the defaults
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import shutil
import signal
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from strata.tools.bench.delivery_check import StoreReader, check, delivered, latency
from strata.tools.bench.delivery_receivers import MqttRecorder, WebhookRecorder
from strata.tools.bench.progress import say
from strata.tools.clips import find_vtest
from strata.tools.demo.stack import Camera, Stack
from strata.tools.mosquitto import Mosquitto

log = logging.getLogger(__name__)

# One directional line across the path and the open area right of it (relative
# coordinates on vtest, as in `strata bench rules`).
RULES: dict[str, Any] = {
    "lines": [
        {"name": "middle", "points": [[0.5, 0.3], [0.5, 0.95]], "in_side": "left"},
    ],
    "zones": [
        {
            "name": "plaza",
            "points": [[0.56, 0.45], [1.0, 0.45], [1.0, 0.85], [0.56, 0.75]],
            "enter_frames": 2,
            "leave_frames": 2,
        }
    ],
}


@dataclass
class Timeline:
    """Phases by wall-clock ns (latency windows) and seconds from the start (the report)."""

    t0_ns: int = field(default_factory=time.time_ns)
    phases: list[dict[str, Any]] = field(default_factory=list)

    def begin(self, name: str) -> None:
        now = time.time_ns()
        if self.phases and self.phases[-1]["end_ns"] is None:
            self.phases[-1]["end_ns"] = now
        self.phases.append({"name": name, "start_ns": now, "end_ns": None})
        say(f"delivery: {name} at {self.seconds(now):.0f} s")

    def end(self) -> None:
        if self.phases and self.phases[-1]["end_ns"] is None:
            self.phases[-1]["end_ns"] = time.time_ns()

    def seconds(self, ns: int) -> float:
        return (ns - self.t0_ns) / 1e9

    def window(self, name: str) -> tuple[int, int] | None:
        for p in self.phases:
            if p["name"] == name and p["end_ns"] is not None:
                return int(p["start_ns"]), int(p["end_ns"])
        return None

    def report(self) -> list[dict[str, Any]]:
        return [
            {
                "name": p["name"],
                "start_s": round(self.seconds(p["start_ns"]), 1),
                "end_s": None if p["end_ns"] is None else round(self.seconds(p["end_ns"]), 1),
            }
            for p in self.phases
        ]


def daemon_config(args: argparse.Namespace, broker_port: int, webhook_url: str) -> dict[str, Any]:
    """The demo's config plus the rules, a looped real-time clip and the two sinks."""
    cameras = [f"cam{i}" for i in range(args.cameras)]
    return {
        "device": {"source": {"realtime": True, "loop": True}},
        "rules": {"cameras": dict.fromkeys(cameras, RULES)},
        "cloud": {
            "sinks": {
                "start": "all",
                "poll_s": 0.1,
                "lease_s": args.lease_s,
                "retry_s": 0.5,
                "max_retry_s": args.max_retry_s,
                "mqtt": [{"port": broker_port, "keepalive_s": 5}],
                "webhooks": [
                    {
                        "url": webhook_url,
                        "cooldown_s": 0,  # every event: the check is that none is lost
                        "attempts": 3,
                        "backoff_s": 0.2,
                        "max_backoff_s": 2.0,
                    }
                ],
            }
        },
    }


def _wait(stack: Stack, seconds: float, until: Callable[[], bool] | None = None) -> bool:
    """Sleep `seconds` (or until `until()`), failing fast when a daemon died; whether
    `until` came true."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        stack.check()
        if until is not None and until():
            return True
        time.sleep(0.05 if until is not None else 0.5)
    return False


@dataclass
class Run:
    """What the phases leave for the report."""

    stack: Stack
    broker: Mosquitto
    mqtt: MqttRecorder
    hook: WebhookRecorder
    store: StoreReader
    timeline: Timeline = field(default_factory=Timeline)
    notes: list[str] = field(default_factory=list)
    killed_after_receipts: int = 0
    backlog_at_kill: dict[str, float] = field(default_factory=dict)
    drained: bool = False
    sinks: dict[str, Any] = field(default_factory=dict)


def _phases(run: Run, args: argparse.Namespace) -> None:
    stack, tl = run.stack, run.timeline
    stack.start_servers(args.startup_timeout_s)
    stack.start_device()
    tl.begin("warm")
    _wait(stack, args.warm_s)
    if not run.store.read():
        run.notes.append("no event was stored during the warm phase")

    tl.begin("broker_down")
    run.broker.stop()
    _wait(stack, args.broker_down_s)
    before = len(run.mqtt.log)
    run.broker.start()

    tl.begin("cloud_kill")
    if not _wait(stack, args.kill_wait_s, lambda: len(run.mqtt.log) > before):
        run.notes.append(f"no event reached the broker {args.kill_wait_s:g} s after it came back")
    run.killed_after_receipts = len(run.mqtt.log) - before
    got = stack.scrape_all().get("cloud")
    if got is not None:  # the backlog gauge is measured every 2 s: roughly what was left
        run.backlog_at_kill = got.by_label("strata_cloud_sink_backlog", "sink")
    pid = stack.procs["cloud"].pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    stack.procs["cloud"].stop()  # reaps it
    log_path = stack.workdir / "cloud.log"
    if log_path.exists():  # the restarted cloud writes its own
        log_path.rename(stack.workdir / "cloud-killed.log")
    time.sleep(args.cloud_down_s)
    stack._start("cloud")  # the same store file and config
    stack.wait_metrics("cloud", args.startup_timeout_s)

    tl.begin("webhook_500")
    # At least webhook_500_s, and until a POST was refused: after the restart the cloud may
    # have had nothing to send in a short window, which would test nothing.
    run.hook.fail_for(args.webhook_500_s + args.kill_wait_s)
    _wait(stack, args.webhook_500_s)
    if not _wait(stack, args.kill_wait_s, lambda: run.hook.refused > 0):
        run.notes.append(f"no POST reached the failing webhook in {args.kill_wait_s:g} s more")
    run.hook.fail_for(0.0)

    tl.begin("calm")
    _wait(stack, args.calm_s)

    tl.begin("drain")
    stack.procs["device"].stop()
    run.drained = _drain(run, args)
    tl.end()
    last = stack.scrape_all().get("cloud")
    if last is not None:
        run.sinks = {
            "delivered_since_restart": last.by_label("strata_cloud_sink_delivered_total", "sink"),
            "failed_since_restart_by_reason": last.by_label(
                "strata_cloud_sink_failed_total", "reason"
            ),
            "dropped_since_restart": last.by_label("strata_cloud_sink_dropped_total", "sink"),
        }


def _drain(run: Run, args: argparse.Namespace) -> bool:
    """Until the store stood still `quiet_s` and both receivers have every stored event."""
    end = time.monotonic() + args.drain_timeout_s
    count, since = -1, time.monotonic()
    while time.monotonic() < end:
        run.stack.check(allow_exit=("device",))
        stored = run.store.read()
        if len(stored) != count:
            count, since = len(stored), time.monotonic()
        quiet = time.monotonic() - since >= args.quiet_s
        if (
            quiet
            and delivered(stored, run.mqtt.receipts())
            and delivered(stored, run.hook.receipts())
        ):
            return True
        time.sleep(0.5)
    return False


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Run the phases; the report (see the module docstring)."""
    clip = find_vtest(args.clip)
    if clip is None or not clip.exists():
        raise SystemExit(
            "bench delivery: data/vtest.mp4 not found (`python .ci/test_data.py` fetches it)"
        )
    out = Path(args.out)
    work = out / "run"
    shutil.rmtree(work, ignore_errors=True)  # a store from an earlier run would be counted
    work.mkdir(parents=True)
    load0 = os.getloadavg()
    broker = Mosquitto(work / "mqtt", persistent=True).start()
    mqtt = MqttRecorder(broker.port, client_id=f"strata-bench-delivery-{os.getpid()}")
    hook = WebhookRecorder()
    stack = Stack(
        workdir=work,
        cameras=[Camera(f"cam{i}", str(clip)) for i in range(args.cameras)],
        extra_config=daemon_config(args, broker.port, hook.url),
    )
    run = Run(stack, broker, mqtt, hook, StoreReader(work / "events.sqlite"))
    try:
        _phases(run, args)
    finally:
        stack.stop()
        mqtt.close()
        hook.close()
        broker.stop()
    stored = run.store.read()
    verdicts = {"mqtt": check(stored, mqtt.receipts()), "webhook": check(stored, hook.receipts())}
    tl = run.timeline
    well = [w for w in (tl.window("warm"), tl.window("calm")) if w is not None]
    ok = run.drained and bool(stored) and all(v.ok for v in verdicts.values())
    return {
        "benchmark": "events to MQTT and a webhook through a broker outage, webhook 500s and "
        "a kill -9 of the cloud",
        "command": getattr(args, "command_line", "strata bench delivery"),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "loadavg_before": [round(x, 2) for x in load0],
            "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        },
        "settings": {k: getattr(args, k) for k in OPTIONS},
        "phases": tl.report(),
        "stored": {
            "total": len(stored),
            **{s: sum(e.source == s for e in stored) for s in ("crops", "track_events")},
        },
        "receivers": {name: {**asdict(v), "ok": v.ok} for name, v in verdicts.items()},
        "webhook_posts": {"tries": hook.tries, "answered_500": hook.refused},
        "mqtt_subscriber_connects": mqtt.connects,
        "malformed": {"mqtt": mqtt.log.malformed, "webhook": hook.log.malformed},
        "cloud_killed_after_broker_receipts": run.killed_after_receipts,
        "sink_backlog_at_kill": run.backlog_at_kill,
        "capture_to_broker_ms": {
            "all_well": asdict(latency(mqtt.receipts(), well)),
            "every_event": asdict(latency(mqtt.receipts(), [])),
        },
        "capture_to_webhook_ms_all_well": asdict(latency(hook.receipts(), well)),
        "sinks": run.sinks,
        "drained": run.drained,
        "notes": run.notes,
        "ok": ok,
    }


OPTIONS = (
    "warm_s",
    "broker_down_s",
    "cloud_down_s",
    "webhook_500_s",
    "calm_s",
    "cameras",
    "lease_s",
    "max_retry_s",
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """`strata bench delivery`'s options."""
    p.add_argument("--warm-s", type=float, default=120.0, help="all well first (120)")
    p.add_argument(
        "--broker-down-s", type=float, default=600.0, help="mosquitto stopped this long (600)"
    )
    p.add_argument(
        "--cloud-down-s", type=float, default=5.0, help="the killed cloud stays down (5)"
    )
    p.add_argument(
        "--webhook-500-s", type=float, default=300.0, help="the webhook answers 500 (300)"
    )
    p.add_argument("--calm-s", type=float, default=120.0, help="all well again at the end (120)")
    p.add_argument("--cameras", type=int, default=1, help="cameras of the clip (1: the demo)")
    p.add_argument(
        "--lease-s", type=float, default=10.0, help="cloud.sinks.lease_s: a killed cloud's claim"
    )
    p.add_argument(
        "--max-retry-s", type=float, default=5.0, help="cloud.sinks.max_retry_s (longest backoff)"
    )
    p.add_argument("--clip", default=None, help="the clip (default: data/vtest.mp4)")
    p.add_argument("--kill-wait-s", type=float, default=120.0, help=argparse.SUPPRESS)
    p.add_argument("--quiet-s", type=float, default=5.0, help=argparse.SUPPRESS)
    p.add_argument("--drain-timeout-s", type=float, default=300.0, help="longest final drain")
    p.add_argument("--startup-timeout-s", type=float, default=120.0, help=argparse.SUPPRESS)
    p.add_argument("--out", default="bench-out/delivery", help="folder of report.json and logs")


def summary(doc: dict[str, Any]) -> str:
    """The figures in a few lines."""
    st = doc["stored"]
    lines = [
        f"stored {st['total']} events ({st['crops']} classified crops, "
        f"{st['track_events']} track events)"
    ]
    for name, v in doc["receivers"].items():
        lines.append(
            f"{name}: lost {v['lost']}, duplicates {v['duplicates']} (under another key: "
            f"{v['wrong_key']}), out of order per camera {v['out_of_order']}, unknown "
            f"{v['unknown']}"
        )
    lat = doc["capture_to_broker_ms"]
    w, e = lat["all_well"], lat["every_event"]
    lines.append(
        f"capture -> broker while all was well: p50 {w['p50_ms']} ms, p99 {w['p99_ms']} ms "
        f"({w['events']} events); every event: p50 {e['p50_ms']} ms, p99 {e['p99_ms']} ms"
    )
    lines += [f"note: {n}" for n in doc["notes"]]
    lines.append("ok" if doc["ok"] else "NOT ok")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """The report in --out/report.json, the figures on stdout; 1 unless all is ok."""
    doc = measure(args)
    out = Path(args.out)
    (out / "report.json").write_text(json.dumps(doc, indent=2) + "\n")
    print(summary(doc))
    print(f"wrote {out / 'report.json'}")
    return 0 if doc["ok"] else 1
