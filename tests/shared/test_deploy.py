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
from strata.shared.gpu_telemetry import DCGM_FIELDS
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
        "ExecReload",
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


UNIT_FILES = {"device": "strata-device", "edge": "strata-edge", "cloud": "strata-cloud"}


@pytest.mark.parametrize(("tier", "name"), [*UNIT_FILES.items(), ("edge", "strata-edge@")], ids=str)
def test_systemd_unit(tier: str, name: str) -> None:
    unit = parse_unit(DEPLOY / "systemd" / f"{name}.service")
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
    argv = shlex.split(svc["ExecStart"].replace("%i", "1"))
    assert argv[0].endswith("/strata") and argv[1] == tier
    check_cli(tier, argv[2:])
    if tier == "edge":
        allowed = [v for k, v in unit["Service"] if k == "DeviceAllow"]
        assert any("nvidia" in v for v in allowed)
        assert "PrivateDevices" not in svc  # the GPU nodes must stay visible
    else:
        assert svc["PrivateDevices"] == "yes"


def test_edge_template_runs_one_edge_per_instance() -> None:
    """strata-edge@N: the single unit's hardening, its own config and state per instance, and
    an example instance config that does not collide with the default edge's ports."""
    single = dict(parse_unit(DEPLOY / "systemd" / "strata-edge.service")["Service"])
    template = dict(parse_unit(DEPLOY / "systemd" / "strata-edge@.service")["Service"])
    per_instance = {"ExecStart", "StateDirectory", "CacheDirectory", "WorkingDirectory"}
    assert set(single) == set(template)
    for key in set(single) - per_instance:
        assert template[key] == single[key], f"{key} differs from strata-edge.service"
    for key in per_instance:
        assert "%i" in template[key], f"{key} must be per instance"
    argv = shlex.split(template["ExecStart"])
    config_path = argv[argv.index("--config") + 1]
    assert config_path == "/etc/strata/edge/%i.yaml"
    example = load_config(DEPLOY / "config" / "edge-1.yaml").edge
    default = load_config(DEPLOY / "config" / "strata.yaml").edge
    ports = lambda e: {  # noqa: E731
        e.listen.rpartition(":")[2],
        e.publish.rpartition(":")[2],
        str(e.metrics.port),
    }
    assert ports(example).isdisjoint(ports(default)), "instances on one host need own ports"
    assert example.edge_id != default.edge_id
    assert example.runtime.device_id == 1


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
    assert set(cloud) == {
        "Deployment",
        "Service",
        "HorizontalPodAutoscaler",
        "PodDisruptionBudget",
    }
    dep, svc, hpa = cloud["Deployment"], cloud["Service"], cloud["HorizontalPodAutoscaler"]
    pod_labels = dep["spec"]["template"]["metadata"]["labels"]
    assert dep["spec"]["selector"]["matchLabels"] == pod_labels
    assert svc["spec"]["selector"].items() <= pod_labels.items()
    assert hpa["spec"]["scaleTargetRef"]["name"] == dep["metadata"]["name"]
    assert hpa["spec"]["minReplicas"] <= hpa["spec"]["maxReplicas"]
    pdb = cloud["PodDisruptionBudget"]
    assert pdb["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    # A drain may evict a replica, never all of them.
    assert pdb["spec"]["maxUnavailable"] < hpa["spec"]["minReplicas"]
    edge = by_kind(docs["edge.yaml"], "DaemonSet")
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


def by_kind(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, found {len(found)}"
    return found[0]


def test_k8s_ports_match_the_config() -> None:
    docs = k8s_docs()
    cfg = embedded_config()
    cloud = {d["kind"]: d for d in docs["cloud.yaml"]}
    grpc_port = int(cfg.cloud.listen.rpartition(":")[2])
    svc_ports = {p["name"]: p["port"] for p in cloud["Service"]["spec"]["ports"]}
    assert svc_ports["grpc"] == grpc_port
    assert cfg.edge.cloud.endswith(f":{grpc_port}")
    edge = pod_spec(by_kind(docs["edge.yaml"], "DaemonSet"))["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in edge["ports"]}
    assert ports["ingest"] == int(cfg.edge.listen.rpartition(":")[2])
    assert ports["results"] == int(cfg.edge.publish.rpartition(":")[2])


def test_k8s_edge_headless_service_finds_every_edge() -> None:
    docs = k8s_docs()
    edge = by_kind(docs["edge.yaml"], "DaemonSet")
    svc = by_kind(docs["edge.yaml"], "Service")
    # Headless: DNS answers with every ready edge pod, which is what device discovery needs.
    assert svc["spec"]["clusterIP"] == "None"
    assert not svc["spec"].get("publishNotReadyAddresses", False)
    labels = edge["spec"]["template"]["metadata"]["labels"]
    assert svc["spec"]["selector"].items() <= labels.items()
    container = pod_spec(edge)["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    for port in svc["spec"]["ports"]:
        assert ports[port["targetPort"]] == port["port"], port


def test_k8s_cloud_replicas_share_one_postgres_from_a_secret() -> None:
    """No per-pod SQLite: the store URL is a file from the strata-db Secret, and both
    database choices (the StatefulSet here, or an external one) fill that Secret."""
    docs = k8s_docs()
    store = embedded_config().cloud.store
    assert store.url_file and not store.url, "the URL (a password) belongs in the Secret"
    dep = by_kind(docs["cloud.yaml"], "Deployment")
    spec = pod_spec(dep)
    container = spec["containers"][0]
    assert "--db" not in container["args"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    folder, _, filename = store.url_file.rpartition("/")
    secret = volumes[mounts[folder]["name"]]["secret"]
    assert secret["secretName"] == "strata-db"
    assert {"key": "url", "path": filename} in secret["items"]
    assert all("emptyDir" not in v or v["name"] == "tmp" for v in volumes.values())
    assert {m["mountPath"] for m in container["volumeMounts"]} == {"/etc/strata", folder, "/tmp"}
    # Choice 1: the StatefulSet, its password from the same Secret, behind a stable name.
    sts = by_kind(docs["postgres.yaml"], "StatefulSet")
    pg_svc = by_kind(docs["postgres.yaml"], "Service")
    assert sts["spec"]["serviceName"] == pg_svc["metadata"]["name"]
    assert sts["spec"]["volumeClaimTemplates"], "PostgreSQL needs a persistent volume"
    pg = pod_spec(sts)["containers"][0]
    env = {e["name"]: e for e in pg["env"]}
    assert env["POSTGRES_PASSWORD"]["valueFrom"]["secretKeyRef"] == {
        "name": "strata-db",
        "key": "password",
    }
    pg_port = {p["name"]: p["containerPort"] for p in pg["ports"]}["postgres"]
    # The README's Secret points at that Service; both choices are documented there.
    readme = (DEPLOY / "k8s" / "README.md").read_text()
    host = f"{pg_svc['metadata']['name']}.{pg_svc['metadata']['namespace']}.svc.cluster.local"
    user, db = env["POSTGRES_USER"]["value"], env["POSTGRES_DB"]["value"]
    assert f"postgresql://{user}:$PW@{host}:{pg_port}/{db}" in readme
    assert "secret generic strata-db" in readme and "--from-literal=password=" in readme
    assert "delete `postgres.yaml`" in readme and "External" in readme.title()


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
    from strata.device.filters.cascade import CascadeMetrics
    from strata.device.filters.site_gate import SiteGateMetrics
    from strata.device.metrics import DeviceMetrics
    from strata.edge.metrics import EdgeMetrics

    suffixes = {
        "counter": ("_total",),
        "gauge": ("",),
        "histogram": ("_bucket", "_count", "_sum"),
        "summary": ("", "_count", "_sum"),
    }
    names: set[str] = set()
    # The agent registers its cascade policy's and site gate's metrics beside DeviceMetrics.
    for cls in (DeviceMetrics, CascadeMetrics, SiteGateMetrics, EdgeMetrics, CloudMetrics):
        registry = CollectorRegistry()
        cls(registry)
        for family in registry.collect():
            names.update(family.name + s for s in suffixes[family.type])
    return names


DCGM_NAMES = {name for name, *_ in DCGM_FIELDS} | {"DCGM_FI_DEV_FB_FREE"}


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
            # GPU panels read NVML telemetry under NVIDIA's DCGM exporter names.
            dcgm = set(re.findall(r"\bDCGM_FI_[A-Z0-9_]+", target["expr"]))
            assert found or dcgm, f"{panel['title']}: a query without a strata or DCGM metric"
            assert dcgm <= DCGM_NAMES, f"{panel['title']}: {sorted(dcgm - DCGM_NAMES)}"
            used |= found
    missing = used - exported
    assert not missing, f"the dashboard uses metrics no tier exports: {sorted(missing)}"
    # Each tier has panels.
    for tier in TIERS:
        assert any(n.startswith(f"strata_{tier}_") for n in used)


def test_demo_reads_only_exported_metrics() -> None:
    from strata.tools.demo.names import BYTES, COUNTS, DROPS, PER_CAMERA, PLAIN_DROPS

    exported = exported_names()
    names = {m.name for m in (*COUNTS.values(), *BYTES.values(), *PLAIN_DROPS.values())}
    names |= {m.name for m in PER_CAMERA.values()}
    names |= {name for _tier, name, _label in DROPS}
    assert names - exported == set()


# --- what the README claims about the defaults ----------------------------------------------


def readme() -> str:
    # One line per paragraph's worth of words: claims wrap across lines.
    return " ".join((ROOT / "README.md").read_text().split())


def test_readme_names_the_shipped_defaults_of_the_cascade() -> None:
    from strata.shared.config.device import DeviceConfig

    dev = DeviceConfig()
    text = readme()
    assert f"`device.sender.encoding: {dev.sender.encoding}`" in text
    assert f"`device.gate.threshold: {dev.gate.threshold}`" in text
    assert dev.gate.positive_class_ids == [] and "no `positive_class_ids`" in text
    # The bench's cascade differs, and the README says how: both halves must stay true.
    from strata.tools.bench.cascade import CASCADE, cascade_config

    bench = CASCADE["device"]
    # The bench measures the shipped encoding unless told otherwise (--encoding h264).
    assert "sender" not in bench
    assert cascade_config()["device"]["sender"]["encoding"] == dev.sender.encoding
    assert "`strata bench cascade --encoding h264`" in text
    assert bench["gate"]["enabled"] is False and "turns the gate off" in text
    # The intro no longer promises H.264 or dropped irrelevant frames by default.
    intro = text[: text.index("```")]
    assert "sends the rest as H.264" not in intro
    # The example config runs the defaults, as the README says.
    example = load_config(DEPLOY / "config" / "strata.yaml").device
    assert example.sender.encoding == dev.sender.encoding
    assert example.gate.threshold == dev.gate.threshold
    assert example.gate.positive_class_ids == dev.gate.positive_class_ids


def test_delivery_paragraph_names_the_pub_limits_and_the_spool() -> None:
    import zmq
    from strata.shared.config.device import SenderConfig

    # The delivery section moved from the README to docs/deploy.md (issue 39).
    text = " ".join((ROOT / "docs" / "deploy.md").read_text().split())
    paragraph = text[text.index("## Delivery guarantee") : text.index("## Several edges")]
    # The edge leaves its PUB socket at ZeroMQ's default high-water mark: the number the
    # README gives is that default.
    node = (ROOT / "edge" / "node.py").read_text()
    pub_options = re.findall(r"\bpub\.setsockopt\(zmq\.(\w+)", node)
    assert "SNDHWM" not in pub_options, "the README's 1000 assumes the default PUB HWM"
    with zmq.Context() as ctx, ctx.socket(zmq.PUB) as pub:
        hwm = pub.getsockopt(zmq.SNDHWM)
    assert f"more than {hwm} messages behind" in paragraph
    assert "no subscriber is connected" in paragraph
    assert "spool_dir" in SenderConfig.model_fields and SenderConfig().spool_dir == ""
    assert "`device.sender.spool_dir` set (empty by default" in paragraph


UNVERIFIED_BACKENDS = ("onnxruntime-cuda", "onnxruntime-tensorrt", "tensorrt", "torch-cuda")


@pytest.mark.parametrize(
    "path",
    [
        DEPLOY / "config" / "strata.yaml",
        DEPLOY / "config" / "edge-1.yaml",
        DEPLOY / "k8s" / "configmap.yaml",
    ],
    ids=lambda p: p.name,
)
def test_an_unverified_gpu_backend_in_an_example_says_so(path: Path) -> None:
    lines = path.read_text().splitlines()
    readme_text = readme()
    for i, line in enumerate(lines):
        m = re.match(r"\s*backend:\s*([\w-]+)", line)
        if m and m.group(1) in UNVERIFIED_BACKENDS:
            # The README's GPU table still calls it unverified, and so does the line above.
            row = next(r for r in readme_text.split("| ") if r.startswith(f"`{m.group(1)}`"))
            assert "not yet run on a gpu" in readme_text[readme_text.index(row) :][:200].lower()
            assert "not yet run on a gpu" in lines[i - 1].lower(), f"{path.name}:{i + 1}"


EXAMPLE_EDGES = {
    "strata.yaml": lambda: load_config(DEPLOY / "config" / "strata.yaml").edge,
    "edge-1.yaml": lambda: load_config(DEPLOY / "config" / "edge-1.yaml").edge,
    "configmap.yaml": lambda: embedded_config().edge,
}


@pytest.mark.parametrize("name", sorted(EXAMPLE_EDGES))
def test_example_edges_bind_off_loopback_with_curve(name: str) -> None:
    """The examples bind as a real site does: reachable from other hosts, so CURVE on both
    sockets and no allow_insecure; the edge's own check accepts them and would refuse them
    without CURVE."""
    from strata.edge.security import EdgeSecurityError, check_binds, is_local

    edge = EXAMPLE_EDGES[name]()
    assert not is_local(edge.listen) and not is_local(edge.publish)
    assert edge.curve.secret_key.endswith(".key_secret") and edge.curve.clients_dir
    assert not edge.allow_insecure
    check_binds(edge)
    plain = edge.model_copy(update={"curve": type(edge.curve)()})
    with pytest.raises(EdgeSecurityError):
        check_binds(plain)


def test_example_agent_speaks_curve_to_the_example_edge() -> None:
    cfg = load_config(DEPLOY / "config" / "strata.yaml")
    agent, edge = cfg.device.sender.curve, cfg.edge.curve
    assert agent.secret_key.endswith(f"/{cfg.device.agent_id}.key_secret")
    # The edge's public half (`strata keys` writes NAME.key beside NAME.key_secret).
    assert agent.server_key == edge.secret_key.removesuffix("_secret")


def test_k8s_edge_mounts_its_curve_keys() -> None:
    curve = embedded_config().edge.curve
    edge = by_kind(k8s_docs()["edge.yaml"], "DaemonSet")
    spec = pod_spec(edge)
    volumes = {v["name"]: v for v in spec["volumes"]}
    mounts = {m["mountPath"]: m for m in spec["containers"][0]["volumeMounts"]}
    folder, _, filename = curve.secret_key.rpartition("/")
    secret = volumes[mounts[folder]["name"]]["secret"]
    assert {"key": filename, "path": filename} in secret["items"]
    # Not readable by others (the pod's fsGroup reads it).
    assert secret["defaultMode"] & 0o007 == 0
    clients = volumes[mounts[curve.clients_dir]["name"]]["configMap"]["name"]
    # The README says how to make both, under the names the pod mounts.
    text = (DEPLOY / "k8s" / "README.md").read_text()
    assert f"create secret generic {secret['secretName']}" in text
    assert f"--from-file={filename}=" in text
    assert f"create configmap {clients}" in text
