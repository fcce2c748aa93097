"""`strata cost`: each camera's cost per day, from running daemons' /metrics endpoints.

Scrapes every edge and cloud endpoint twice, `--interval` seconds apart, takes the
per-camera counter deltas (GPU-seconds, bytes, events, stored bytes, clip bytes) and prices a day of
that rate with the config's `cost` section.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.error
import urllib.request
from dataclasses import asdict
from typing import Any


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `strata cost`."""
    p = subparsers.add_parser(
        "cost",
        help="cost per camera per day from running daemons' metrics",
        description=(
            "Scrape edge and cloud /metrics endpoints twice, --interval seconds apart, and "
            "price a day at the measured per-camera rates (cost section of the config)."
        ),
    )
    p.add_argument("--edge", action="append", default=[], metavar="URL", help="edge /metrics")
    p.add_argument("--cloud", action="append", default=[], metavar="URL", help="cloud /metrics")
    p.add_argument("--config", metavar="FILE", help="config file with a cost section")
    p.add_argument("--interval", type=float, default=10.0, metavar="S", help="seconds measured")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=run)


def metrics_url(target: str) -> str:
    """http://host:port/metrics from a URL or host:port."""
    url = target if "://" in target else f"http://{target}"
    return url if url.rstrip("/").endswith("/metrics") else url.rstrip("/") + "/metrics"


def scrape(urls: list[str], timeout_s: float = 5.0) -> list[Any]:
    """Every sample of every endpoint; a failing endpoint raises OSError naming it."""
    from strata.shared.cost import parse_exposition

    samples = []
    for url in urls:
        try:
            with urllib.request.urlopen(url, timeout=timeout_s) as resp:
                text = resp.read().decode()
        except (OSError, urllib.error.URLError) as exc:
            raise OSError(f"cannot scrape {url}: {exc}") from exc
        samples += parse_exposition(text)
    return samples


def run(args: argparse.Namespace) -> int:
    from strata.shared.config import load_config
    from strata.shared.cost import Usage, per_day, usage_by_camera

    urls = [metrics_url(u) for u in [*args.edge, *args.cloud]]
    if not urls:
        print("strata cost: give at least one --edge or --cloud endpoint", file=sys.stderr)
        return 2
    if args.interval <= 0:
        print("strata cost: --interval must be positive", file=sys.stderr)
        return 2
    prices = load_config(args.config).cost
    try:
        before = usage_by_camera(scrape(urls))
        t0 = time.monotonic()
        time.sleep(args.interval)
        after = usage_by_camera(scrape(urls))
        window = time.monotonic() - t0
    except OSError as exc:
        print(f"strata cost: {exc}", file=sys.stderr)
        return 1
    rows: list[dict[str, Any]] = []
    for camera, now in after.items():
        delta = now - before.get(camera, Usage())
        cost = per_day(delta, window, prices)
        scale = 86_400.0 / window
        rows.append(
            {
                "camera": camera,
                "frames_per_day": round(delta.frames * scale),
                "gpu_seconds_per_day": round(
                    (delta.edge_gpu_seconds + delta.cloud_gpu_seconds) * scale, 1
                ),
                "egress_gb_per_day": round(delta.egress_bytes * scale / 1e9, 4),
                "clip_gb_per_day": round(delta.clip_bytes * scale / 1e9, 4),
                "events_per_day": round(delta.events * scale),
                "cost_per_day": {k: round(v, 4) for k, v in asdict(cost).items()}
                | {"total": round(cost.total, 4)},
            }
        )
    doc = {
        "window_s": round(window, 2),
        "currency": prices.currency,
        "prices": prices.model_dump(),
        "endpoints": urls,
        "cameras": rows,
        "total_per_day": round(sum(r["cost_per_day"]["total"] for r in rows), 4),
    }
    if args.json:
        print(json.dumps(doc, indent=2))
        return 0
    cur = prices.currency
    print(f"cost per camera per day ({cur}), rates over {window:.1f} s from {len(urls)} endpoints")
    print(f"{'camera':<20} {'frames/day':>11} {'GPU s/day':>10} {'egress GB':>10} "
          f"{'clips GB':>9} {'events':>8} {'GPU':>9} {'egress':>9} {'storage':>9} "
          f"{'total':>9}")  # fmt: skip
    for r in rows:
        c = r["cost_per_day"]
        print(
            f"{r['camera']:<20} {r['frames_per_day']:>11} {r['gpu_seconds_per_day']:>10} "
            f"{r['egress_gb_per_day']:>10} {r['clip_gb_per_day']:>9} {r['events_per_day']:>8} "
            f"{c['gpu']:>9.4f} {c['egress']:>9.4f} {c['storage']:>9.4f} {c['total']:>9.4f}"
        )
    print(f"{'all cameras':<20} {doc['total_per_day']:>98.4f}")
    return 0
