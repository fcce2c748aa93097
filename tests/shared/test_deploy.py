"""deploy/: every file parses, and what it says agrees with the code (CLI flags, config).

The real tools (Kubernetes schemas, systemd-analyze, promtool, a live Prometheus) and the
Containerfile checks are in tests/deploy/."""

from __future__ import annotations

import argparse
import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml
from strata.shared.config import load_config
from strata.shared.config.root import StrataConfig
from strata.tools.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
TIERS = ("device", "edge", "cloud")
METRICS_PORTS = {"device": 9101, "edge": 9102, "cloud": 9103}

# Directives the units may use; a typo in a unit is silently ignored by systemd, so check.
SYSTEMD_KEYS = {
    "Unit": {
        "Description",
        "Documentation",
        "Wants",
        "After",
        "Requires",
        "StartLimitIntervalSec",
        "StartLimitBurst",
    },
    "Service": {
        "Type",
        "ExecStart",
        "KillSignal",
        "TimeoutStopSec",
        "Restart",
        "RestartSec",
        "StateDirectory",
        "CacheDirectory",
        "WorkingDirectory",
        "Environment",
        "DynamicUser",
        "ReadOnlyPaths",
        "NoNewPrivileges",
        "ProtectSystem",
        "ProtectHome",
        "PrivateTmp",
        "PrivateDevices",
        "ProtectKernelTunables",
        "ProtectKernelModules",
        "ProtectKernelLogs",
        "ProtectControlGroups",
        "ProtectClock",
        "ProtectHostname",
        "RestrictNamespaces",
        "RestrictRealtime",
        "RestrictSUIDSGID",
        "LockPersonality",
        "RestrictAddressFamilies",
        "CapabilityBoundingSet",
        "AmbientCapabilities",
        "SystemCallArchitectures",
        "SystemCallFilter",
        "UMask",
        "DevicePolicy",
        "DeviceAllow",
        "LimitMEMLOCK",
    },
    "Install": {"WantedBy"},
}


def parse_unit(path: Path) -> dict[str, list[tuple[str, str]]]:
    """A systemd unit as {section: [(key, value), ...]}; repeated keys are kept."""
    out: dict[str, list[tuple[str, str]]] = {}
    section = None
    for n, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if m := re.fullmatch(r"\[(\w+)\]", line):
            section = m.group(1)
            out.setdefault(section, [])
            continue
        assert section is not None, f"{path}:{n}: key outside a section"
        key, sep, value = line.partition("=")
        assert sep, f"{path}:{n}: not key=value: {line!r}"
        out[section].append((key.strip(), value.strip()))
    return out


def subcommand_parser(tier: str) -> argparse.ArgumentParser | None:
    """The argparse parser of `strata TIER`, or None while that tier is not installed."""
    root = build_parser()
    for action in root._actions:
        if isinstance(action, argparse._SubParsersAction):
            parser: argparse.ArgumentParser | None = action.choices.get(tier)
            return parser
    return None


def check_cli(tier: str, args: list[str]) -> None:
    parser = subcommand_parser(tier)
    if parser is None:
        return  # the tier is not part of this build yet; its flags cannot be checked
    try:
        parser.parse_args(args)
    except SystemExit:
        pytest.fail(f"`strata {tier} {' '.join(args)}` does not parse")


@pytest.mark.parametrize("tier", TIERS)
def test_systemd_unit(tier: str) -> None:
    unit = parse_unit(DEPLOY / "systemd" / f"strata-{tier}.service")
    assert set(unit) == {"Unit", "Service", "Install"}
    for section, pairs in unit.items():
        unknown = {k for k, _ in pairs} - SYSTEMD_KEYS[section]
        assert not unknown, f"unknown directives in [{section}]: {unknown}"
    svc = dict(unit["Service"])
    assert svc["Restart"] in {"on-failure", "always"}
    assert svc["NoNewPrivileges"] == "yes"
    assert svc["ProtectSystem"] == "strict"
    assert svc["CapabilityBoundingSet"] == ""
    assert svc["DynamicUser"] == "yes"
    argv = shlex.split(svc["ExecStart"])
    assert argv[0].endswith("/strata") and argv[1] == tier
    check_cli(tier, argv[2:])
    if tier == "edge":
        allowed = [v for k, v in unit["Service"] if k == "DeviceAllow"]
        assert any("nvidia" in v for v in allowed)
        assert "PrivateDevices" not in svc  # the GPU nodes must stay visible
    else:
        assert svc["PrivateDevices"] == "yes"


def k8s_docs() -> dict[str, list[dict[str, Any]]]:
    out = {}
    for path in sorted((DEPLOY / "k8s").glob("*.yaml")):
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
        out[path.name] = docs
    return out


def embedded_config() -> StrataConfig:
    cm = k8s_docs()["configmap.yaml"][0]
    assert cm["kind"] == "ConfigMap"
    data = yaml.safe_load(cm["data"]["strata.yaml"])
    return load_config(None, data)


def pod_spec(doc: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = doc["spec"]["template"]["spec"]
    return spec


def test_k8s_manifests_parse_and_agree() -> None:
    docs = k8s_docs()
    for name, items in docs.items():
        for d in items:
            need = (
                {"apiVersion", "kind"}
                if d.get("kind") == "Kustomization"
                else {"apiVersion", "kind", "metadata"}
            )
            assert need <= set(d), f"{name}: incomplete object"
    kust = docs["kustomization.yaml"][0]
    assert sorted(kust["resources"]) == sorted(n for n in docs if n != "kustomization.yaml")
    cloud = {d["kind"]: d for d in docs["cloud.yaml"]}
    assert set(cloud) == {"Deployment", "Service", "HorizontalPodAutoscaler"}
    dep, svc, hpa = cloud["Deployment"], cloud["Service"], cloud["HorizontalPodAutoscaler"]
    pod_labels = dep["spec"]["template"]["metadata"]["labels"]
    assert dep["spec"]["selector"]["matchLabels"] == pod_labels
    assert svc["spec"]["selector"].items() <= pod_labels.items()
    assert hpa["spec"]["scaleTargetRef"]["name"] == dep["metadata"]["name"]
    assert hpa["spec"]["minReplicas"] <= hpa["spec"]["maxReplicas"]
    edge = docs["edge.yaml"][0]
    assert edge["kind"] == "DaemonSet"
    edge_container = pod_spec(edge)["containers"][0]
    assert edge_container["resources"]["limits"]["nvidia.com/gpu"] == 1
    cfg = embedded_config()
    for tier, doc in (("cloud", dep), ("edge", edge)):
        container = pod_spec(doc)["containers"][0]
        check_cli(tier, container["args"])
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        metrics_port = getattr(cfg, tier).metrics.port
        assert ports["metrics"] == metrics_port
        annotations = doc["spec"]["template"]["metadata"]["annotations"]
        assert int(annotations["prometheus.io/port"]) == metrics_port
        volumes = {v["name"]: v for v in pod_spec(doc)["volumes"]}
        assert volumes["config"]["configMap"]["name"] == "strata-config"


def test_k8s_ports_match_the_config() -> None:
    docs = k8s_docs()
    cfg = embedded_config()
    cloud = {d["kind"]: d for d in docs["cloud.yaml"]}
    grpc_port = int(cfg.cloud.listen.rpartition(":")[2])
    svc_ports = {p["name"]: p["port"] for p in cloud["Service"]["spec"]["ports"]}
    assert svc_ports["grpc"] == grpc_port
    assert cfg.edge.cloud.endswith(f":{grpc_port}")
    edge = pod_spec(docs["edge.yaml"][0])["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in edge["ports"]}
    assert ports["ingest"] == int(cfg.edge.listen.rpartition(":")[2])
    assert ports["results"] == int(cfg.edge.publish.rpartition(":")[2])


def test_configs_validate() -> None:
    cfg = embedded_config()
    example = load_config(DEPLOY / "config" / "strata.yaml")
    for tier in TIERS:
        assert getattr(cfg, tier).metrics.port == METRICS_PORTS[tier]
        assert getattr(example, tier).metrics.port == METRICS_PORTS[tier]


def exported_names() -> set[str]:
    """Every sample name the three tiers' metric registries can export (labelled or not)."""
    from prometheus_client import CollectorRegistry
    from strata.cloud.metrics import CloudMetrics
    from strata.device.metrics import DeviceMetrics
    from strata.edge.metrics import EdgeMetrics

    suffixes = {
        "counter": ("_total",),
        "gauge": ("",),
        "histogram": ("_bucket", "_count", "_sum"),
        "summary": ("", "_count", "_sum"),
    }
    names: set[str] = set()
    for cls in (DeviceMetrics, EdgeMetrics, CloudMetrics):
        registry = CollectorRegistry()
        cls(registry)
        for family in registry.collect():
            names.update(family.name + s for s in suffixes[family.type])
    return names


def test_grafana_dashboard_uses_only_exported_metrics() -> None:
    dash = json.loads((DEPLOY / "grafana" / "strata.json").read_text())
    exported = exported_names()
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    used: set[str] = set()
    for panel in dash["panels"]:
        pos = panel["gridPos"]
        assert pos["x"] + pos["w"] <= 24
        for target in panel.get("targets", []):
            found = set(re.findall(r"\bstrata_[a-z0-9_]+", target["expr"]))
            assert found, f"{panel['title']}: a query without a strata metric"
            used |= found
    missing = used - exported
    assert not missing, f"the dashboard uses metrics no tier exports: {sorted(missing)}"
    # Each tier has panels.
    for tier in TIERS:
        assert any(n.startswith(f"strata_{tier}_") for n in used)


def test_demo_reads_only_exported_metrics() -> None:
    from strata.tools.demo.names import BYTES, COUNTS, DROPS, PLAIN_DROPS

    exported = exported_names()
    names = {m.name for m in (*COUNTS.values(), *BYTES.values(), *PLAIN_DROPS.values())}
    names |= {name for _tier, name, _label in DROPS}
    assert names - exported == set()
