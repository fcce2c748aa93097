"""The three daemons on 127.0.0.1 as separate processes, wired by one generated config file."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from strata.shared.config import load_config
from strata.shared.config.base import merge
from strata.shared.loopback import free_port
from strata.tools.demo.procs import TierExitedError, TierProcess
from strata.tools.demo.scrape import Samples, parse, scrape

log = logging.getLogger(__name__)

TIERS = ("device", "edge", "cloud")


@dataclass(frozen=True, slots=True)
class Camera:
    """One source and the camera id its frames carry."""

    id: str
    source: str


@dataclass(frozen=True, slots=True)
class Ports:
    """Every port the stack uses, all on 127.0.0.1."""

    edge_listen: int
    edge_publish: int
    cloud: int
    metrics: dict[str, int]

    @classmethod
    def pick(cls) -> Ports:
        """Free ports for everything."""
        return cls(free_port(), free_port(), free_port(), {t: free_port() for t in TIERS})


@dataclass
class Stack:
    """Config, processes and addresses of one cloud + edge + device run."""

    workdir: Path
    cameras: list[Camera]
    extra_config: dict[str, Any] = field(default_factory=dict)
    ports: Ports = field(default_factory=Ports.pick)
    procs: dict[str, TierProcess] = field(default_factory=dict)

    @property
    def config_path(self) -> Path:
        """The generated strata.yaml."""
        return self.workdir / "strata.yaml"

    @property
    def publish_address(self) -> str:
        """The edge node's results PUB socket."""
        return f"tcp://127.0.0.1:{self.ports.edge_publish}"

    @property
    def cloud_address(self) -> str:
        """The cloud's gRPC HOST:PORT."""
        return f"127.0.0.1:{self.ports.cloud}"

    def metrics_url(self, tier: str) -> str:
        """The /metrics URL of a tier."""
        return f"http://127.0.0.1:{self.ports.metrics[tier]}/metrics"

    def config(self) -> dict[str, Any]:
        """The config every daemon reads (validated before anything starts)."""
        p = self.ports
        base: dict[str, Any] = {
            "cloud": {
                "listen": self.cloud_address,
                "store": {"path": str(self.workdir / "events.sqlite")},
                "metrics": {"port": p.metrics["cloud"]},
            },
            "edge": {
                "listen": f"tcp://127.0.0.1:{p.edge_listen}",
                "publish": self.publish_address,
                "cloud": self.cloud_address,
                "uplink": {"spool_path": str(self.workdir / "uplink-spool.sqlite")},
                "metrics": {"port": p.metrics["edge"]},
            },
            "device": {
                "edge": f"tcp://127.0.0.1:{p.edge_listen}",
                "cameras": [{"id": c.id, "source": c.source} for c in self.cameras],
                "metrics": {"port": p.metrics["device"]},
            },
        }
        return merge(base, self.extra_config)

    def write_config(self) -> Path:
        """Validate and write strata.yaml; a bad extra_config fails here, before any start."""
        data = self.config()
        load_config(None, data)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(yaml.safe_dump(data, sort_keys=False))
        return self.config_path

    def final_metrics_path(self, tier: str) -> Path:
        """Where a daemon that exits on its own leaves its last metrics (the device does)."""
        return self.workdir / f"{tier}-final.prom"

    def final_metrics(self, tier: str) -> Samples | None:
        """The metrics a daemon wrote as it exited, if it did."""
        path = self.final_metrics_path(tier)
        try:
            return parse(path.read_text())
        except (OSError, ValueError):
            return None

    def _start(self, tier: str) -> TierProcess:
        args = [tier, "--config", str(self.config_path)]
        if tier == "device":
            self.final_metrics_path(tier).unlink(missing_ok=True)
            args += ["--metrics-file", str(self.final_metrics_path(tier))]
        proc = TierProcess(tier, args, self.workdir / f"{tier}.log")
        proc.start()
        self.procs[tier] = proc
        log.info("started %s (pid %s)", tier, proc.pid)
        return proc

    def wait_metrics(self, tier: str, timeout: float) -> Samples:
        """Wait until a tier's /metrics answers; TierExitedError if it exits first."""
        deadline = time.monotonic() + timeout
        proc = self.procs[tier]
        while True:
            proc.check()
            got = scrape(self.metrics_url(tier), timeout=1.0)
            if got is not None:
                return got
            if time.monotonic() > deadline:
                raise TierExitedError(
                    tier, -1, [f"no /metrics answer within {timeout:.0f}s", *proc.tail()]
                )
            time.sleep(0.1)

    def start_servers(self, timeout: float = 60.0) -> None:
        """Cloud, then edge; each must answer on its metrics port before the next starts."""
        self.write_config()
        self._start("cloud")
        self.wait_metrics("cloud", timeout)
        self._start("edge")
        self.wait_metrics("edge", timeout)

    def start_device(self) -> None:
        """The device agent (start it once a results subscriber is connected)."""
        self._start("device")

    def restart(self, tier: str, timeout: float = 60.0) -> None:
        """Start `tier` again after it stopped or was killed (its log starts over); a server
        is awaited on its metrics port."""
        self._start(tier)
        if tier != "device":
            self.wait_metrics(tier, timeout)

    def check(self, allow_exit: tuple[str, ...] = ()) -> None:
        """Raise TierExitedError for a daemon that exited, unless cleanly and in allow_exit."""
        for name, proc in self.procs.items():
            rc = proc.returncode()
            if rc is None or (rc == 0 and name in allow_exit):
                continue
            raise TierExitedError(name, rc, proc.tail())

    def scrape_all(self, timeout: float = 1.0) -> dict[str, Samples]:
        """Current metrics of each running tier (absent when it does not answer)."""
        out = {}
        for tier, proc in self.procs.items():
            if not proc.running():
                continue
            got = scrape(self.metrics_url(tier), timeout=timeout)
            if got is not None:
                out[tier] = got
        return out

    def stop(self) -> dict[str, int | None]:
        """Device first, then edge, then cloud, so in-flight work drains downstream."""
        codes = {}
        for tier in TIERS:
            if tier in self.procs:
                codes[tier] = self.procs[tier].stop()
        return codes
