"""A real Prometheus (Debian's) scrapes a daemon's TLS + basic auth /metrics with the shipped
job (a scrape without the password gets 401), and the three daemons of a short demo run, with the
shipped scrape config (targets moved to loopback, 1 s interval) and the shipped alerts; then
every PromQL expression of the Grafana dashboard is evaluated through its HTTP API as Grafana
would (a range query, $__rate_interval expanded). A query that errors fails; so does one that
returns no data, unless it is listed in NO_DATA_ON_CPU_WITHOUT_FAULTS with the reason."""

from __future__ import annotations

import json
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from deploy_kit import (
    DEPLOY,
    STATIC_CONFIG,
    TIERS,
    PanelQuery,
    dashboard_queries,
    expand_variables,
    tool,
)
from strata.shared.loopback import free_port

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

RULES = STATIC_CONFIG.parent / "strata-alerts.yml"
# vtest's first frames, paced at its 10 fps: about 12 s of traffic. Not the synthetic clip:
# a COCO detector (the default since issue 38) sees nothing in its coloured shapes, so no
# crop would reach the cloud and its panels would have no data.
FRAMES = 120

# Queries (panel title / refId) that have no data in a short CPU run without faults, and why.
# Every other query must return at least one series with a number in it.
NO_DATA_ON_CPU_WITHOUT_FAULTS = {
    "Frames in, by ack status / B": "rejections: only malformed or refused frames count",
    "Drops by reason / A": "edge drops: only overload or a full crop buffer count",
    "Requests per second / B": "cloud failures: only refused or failed requests count",
    # NVML telemetry is absent (not zero) without a GPU; degradation never moves unloaded.
    "GPU temperature / A": "no GPU on a CPU host: DCGM metrics are absent",
    "GPU memory used / A": "no GPU on a CPU host: DCGM metrics are absent",
    "GPU utilization, power and SM clock / A": "no GPU on a CPU host: DCGM metrics are absent",
    "GPU utilization, power and SM clock / B": "no GPU on a CPU host: DCGM metrics are absent",
    "GPU utilization, power and SM clock / C": "no GPU on a CPU host: DCGM metrics are absent",
    "Degradation transitions / A": "no trigger fires in a short unloaded run",
}


@dataclass
class Prometheus:
    """A Prometheus server on 127.0.0.1 and its HTTP API."""

    url: str

    def get(self, path: str, **params: str) -> Any:
        query = urllib.parse.urlencode(params)
        try:
            with urllib.request.urlopen(f"{self.url}{path}?{query}", timeout=10) as r:
                body = json.loads(r.read())
        except urllib.error.HTTPError as exc:  # PromQL errors come back as 400 with JSON
            body = json.loads(exc.read())
        return body

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as r:
                return bool(r.status == 200)
        except OSError:
            return False


def scrape_config(ports: dict[str, int], secured: SecuredScrape | None = None) -> dict[str, Any]:
    """The shipped static config with every target on loopback and a 1 s interval.

    Without `secured`, the jobs scrape plain HTTP (the demo's daemons serve loopback, open);
    with it, the shipped TLS and basic auth stay and only their files point at the test's."""
    config: dict[str, Any] = yaml.safe_load(STATIC_CONFIG.read_text())
    config["global"].update(
        {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"}
    )
    config["rule_files"] = [str(RULES)]
    config["scrape_configs"] = [
        j for j in config["scrape_configs"] if j["job_name"].removeprefix("strata-") in ports
    ]
    for job in config["scrape_configs"]:
        tier = job["job_name"].removeprefix("strata-")
        for static in job["static_configs"]:
            static["targets"] = [f"127.0.0.1:{ports[tier]}"]
        if secured is None:
            for key in ("scheme", "tls_config", "basic_auth"):
                job.pop(key, None)
        else:
            job["tls_config"]["ca_file"] = str(secured.ca_file)
            job["basic_auth"]["password_file"] = str(secured.password_file)
    return config


@dataclass(frozen=True, slots=True)
class SecuredScrape:
    """The files the shipped scrape config names, made for a test."""

    ca_file: Path
    password_file: Path


@pytest.fixture
def prometheus_for(tmp_path: Path) -> Iterator[Any]:
    """A function starting Prometheus for given metrics ports; stopped at the end."""
    binary = tool("prometheus")
    procs: list[subprocess.Popen[bytes]] = []

    def start(ports: dict[str, int], secured: SecuredScrape | None = None) -> Prometheus:
        config = tmp_path / "prometheus.yml"
        config.write_text(yaml.safe_dump(scrape_config(ports, secured)))
        port = free_port()
        with (tmp_path / "prometheus.log").open("wb") as log:  # the child keeps its own copy
            procs.append(
                subprocess.Popen(
                    [
                        binary,
                        f"--config.file={config}",
                        f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                        f"--web.listen-address=127.0.0.1:{port}",
                        "--log.level=warn",
                    ],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            )
        prom = Prometheus(f"http://127.0.0.1:{port}")
        deadline = time.monotonic() + 30
        while not prom.ready():
            assert procs[-1].poll() is None, (tmp_path / "prometheus.log").read_text()
            assert time.monotonic() < deadline, "Prometheus did not become ready in 30 s"
            time.sleep(0.2)
        return prom

    yield start
    for p in procs:
        p.terminate()
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


@dataclass(frozen=True, slots=True)
class Answer:
    """What a dashboard query returned over the run."""

    error: str | None
    series: int
    with_numbers: int


def evaluate(prom: Prometheus, q: PanelQuery, start: float, end: float) -> Answer:
    body = prom.get(
        "/api/v1/query_range",
        query=expand_variables(q.expr),
        start=f"{start:.3f}",
        end=f"{end:.3f}",
        step="1",
    )
    if body["status"] != "success":
        return Answer(f"{body.get('errorType')}: {body.get('error')}", 0, 0)
    if body.get("warnings"):
        return Answer(f"warnings: {body['warnings']}", 0, 0)
    result = body["data"]["result"]
    numbers = sum(
        1 for s in result if any(v not in {"NaN", "+Inf", "-Inf"} for _t, v in s["values"])
    )
    return Answer(None, len(result), numbers)


def test_every_dashboard_query_has_data_from_a_real_run(
    tmp_path: Path, prometheus_for: Any, vtest_mp4: Path
) -> None:
    from strata.tools import cascade_clips
    from strata.tools.demo.pipeline import PipelineRun, RunOptions
    from strata.tools.demo.stack import Camera

    queries = dashboard_queries()
    keys = [q.key for q in queries]
    assert len(keys) == len(set(keys)), "two queries of one panel share a refId"
    stale = set(NO_DATA_ON_CPU_WITHOUT_FAULTS) - set(keys)
    assert not stale, f"exemptions for queries the dashboard no longer has: {stale}"

    run = PipelineRun(
        tmp_path / "run",
        [Camera("cam0-vtest", str(cascade_clips.make("vtest", vtest_mp4, tmp_path, FRAMES)))],
        # A gate that can drop (a threshold above 0) runs, so its panel has data; the
        # shipped default keeps every frame without running it. The file is paced as a
        # camera delivers it.
        # The site gate is on so that its panels have data (it is off by default).
        overrides={
            "device": {
                "gate": {"threshold": 1e-6, "site": {"enabled": True}},
                "source": {"realtime": True},
            }
        },
        options=RunOptions(startup_timeout_s=90.0, quiet_s=3.0, drain_timeout_s=30.0),
    )
    prom = prometheus_for(run.stack.ports.metrics)
    started = time.time()
    outcome = run.execute()
    # A few more scrapes of nothing, so the last rate windows close.
    time.sleep(2)
    ended = time.time()
    assert outcome.error is None, outcome.error
    assert outcome.results, "the run produced no results: nothing to look at"

    # Every daemon was scraped.
    for tier in TIERS:
        up = prom.get(
            "/api/v1/query_range",
            query=f'max(up{{job="strata-{tier}"}})',
            start=f"{started:.3f}",
            end=f"{ended:.3f}",
            step="1",
        )
        values = [float(v) for s in up["data"]["result"] for _t, v in s["values"]]
        assert 1.0 in values, f"Prometheus never scraped {tier}: {up}"

    problems = []
    for q in queries:
        answer = evaluate(prom, q, started, ended)
        if answer.error is not None:
            problems.append(f"{q.key}: {answer.error}\n    {q.expr}")
        elif answer.with_numbers == 0 and q.key not in NO_DATA_ON_CPU_WITHOUT_FAULTS:
            problems.append(f"{q.key}: no data ({answer.series} series)\n    {q.expr}")
    assert not problems, "dashboard queries against the run:\n" + "\n".join(problems)

    # The alerting rules ran against the real series without an evaluation error.
    groups = prom.get("/api/v1/rules")["data"]["groups"]
    rules = [r for g in groups for r in g["rules"]]
    assert rules, "the alerting rules were not loaded"
    broken = [f"{r['name']}: {r.get('lastError')}" for r in rules if r["health"] == "err"]
    assert not broken, broken


def test_prometheus_scrapes_tls_basic_auth_metrics_with_the_shipped_config(
    tmp_path: Path, prometheus_for: Any
) -> None:
    """The cloud daemon serves /metrics with its metrics section as deploy/config/strata.yaml
    ships it (only the files and the password are the test's); Prometheus scrapes it with the
    shipped job (https, tls_config, basic_auth); a scrape without the password gets 401."""
    import bcrypt
    from tls_certs import make_pki

    shipped = yaml.safe_load((DEPLOY / "config" / "strata.yaml").read_text())["cloud"]["metrics"]
    job = next(
        j
        for j in yaml.safe_load(STATIC_CONFIG.read_text())["scrape_configs"]
        if j["job_name"] == "strata-cloud"
    )
    assert job["scheme"] == "https"
    user = job["basic_auth"]["username"]
    assert set(shipped["web"]["basic_auth_users"]) == {user}, "the job's user is not a metrics user"
    pki = make_pki(tmp_path)
    password = "scrape-me-" + tmp_path.name
    (tmp_path / "password").write_text(password + "\n")
    metrics_port = free_port()
    web = shipped["web"]
    web["tls_server_config"].update(cert_file=str(pki.server_cert), key_file=str(pki.server_key))
    web["basic_auth_users"] = {user: bcrypt.hashpw(password.encode(), bcrypt.gensalt(4)).decode()}
    config = tmp_path / "strata.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "cloud": {
                    "listen": f"127.0.0.1:{free_port()}",
                    "store": {"path": str(tmp_path / "events.sqlite")},
                    "metrics": shipped | {"host": "127.0.0.1", "port": metrics_port},
                }
            }
        )
    )
    cloud = subprocess.Popen(
        [sys.executable, "-m", "strata.tools.cli", "cloud", "--config", str(config)],
        stdout=subprocess.DEVNULL,
        stderr=(tmp_path / "cloud.log").open("wb"),
    )
    try:
        url = f"https://127.0.0.1:{metrics_port}/metrics"
        ctx = ssl.create_default_context(cafile=str(pki.ca))
        deadline = time.monotonic() + 90
        while True:
            assert cloud.poll() is None, (tmp_path / "cloud.log").read_text()
            assert time.monotonic() < deadline, "the cloud's /metrics did not come up in 90 s"
            try:
                urllib.request.urlopen(url, timeout=2, context=ctx)
            except urllib.error.HTTPError as exc:
                assert exc.code == 401, exc  # up, and no credentials: refused
                break
            except OSError:
                time.sleep(0.3)
            else:
                raise AssertionError("a scrape without credentials got the metrics")

        prom = prometheus_for({"cloud": metrics_port}, SecuredScrape(pki.ca, tmp_path / "password"))
        deadline = time.monotonic() + 30
        while True:
            targets = prom.get("/api/v1/targets")["data"]["activeTargets"]
            health = {t["labels"]["job"]: (t["health"], t["lastError"]) for t in targets}
            if health.get("strata-cloud", ("", ""))[0] == "up":
                break
            assert time.monotonic() < deadline, f"Prometheus never scraped the cloud: {health}"
            time.sleep(0.5)
        # Prometheus holds the daemon's own series, not just `up`.
        series = prom.get("/api/v1/query", query='strata_cloud_queue_depth{job="strata-cloud"}')
        assert series["data"]["result"], series
    finally:
        cloud.send_signal(signal.SIGTERM)
        cloud.wait(30)
