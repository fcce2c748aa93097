"""The Prometheus configs and alerting rules, checked by promtool, and the Kubernetes config
checked structurally and by running its relabelling on the rendered pods.

Debian's promtool (2.42) is built without Kubernetes service discovery: it rejects
`kubernetes_sd_configs` as an unknown field. So prometheus-kubernetes.yml goes through promtool
with its discovery block swapped for static targets (everything else, relabelling included,
is checked for real), and the discovery block itself is checked here against the manifests.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from deploy_kit import (
    DEPLOY,
    KUBERNETES_CONFIG,
    PROMETHEUS,
    STATIC_CONFIG,
    TIERS,
    exported_names,
    object_key,
    pod_templates,
    render_kustomization,
    tool,
)

RULES = PROMETHEUS / "strata-alerts.yml"
RULE_TESTS = PROMETHEUS / "strata-alerts.test.yml"
# Names the GPU telemetry of the edge exports (NVIDIA DCGM exporter's, issue 14); they are
# created when a GPU is found, so no registry built on a CPU lists them.
DCGM_NAMES = {"DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE"}
SD_ROLES = {"node", "service", "pod", "endpoints", "endpointslice", "ingress"}


def promtool(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [tool("promtool"), *args], capture_output=True, text=True, timeout=60, cwd=cwd
    )


def load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(path.read_text())
    return data


def test_promtool_checks_the_static_config() -> None:
    out = promtool("check", "config", str(STATIC_CONFIG))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "1 rule files found" in out.stdout, "prometheus.yml should load strata-alerts.yml"


def test_static_config_has_one_job_per_tier_on_its_metrics_port() -> None:
    from strata.shared.config import load_config

    example = load_config(DEPLOY / "config" / "strata.yaml")  # the hosts' example config
    jobs = {j["job_name"]: j for j in load(STATIC_CONFIG)["scrape_configs"]}
    assert set(jobs) == {f"strata-{t}" for t in TIERS}
    for tier in TIERS:
        port = getattr(example, tier).metrics.port
        for static in jobs[f"strata-{tier}"]["static_configs"]:
            assert static["labels"]["tier"] == tier
            for target in static["targets"]:
                assert target.rpartition(":")[2] == str(port), f"{tier}: {target}"


def test_promtool_checks_the_rules() -> None:
    out = promtool("check", "rules", str(RULES))
    assert out.returncode == 0, out.stdout + out.stderr


def test_promtool_unit_tests_of_the_alerts_pass() -> None:
    # Relative rule paths in the test file resolve from the working directory.
    out = promtool("test", "rules", RULE_TESTS.name, cwd=PROMETHEUS)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS" in out.stdout


def alert_rules() -> list[dict[str, Any]]:
    return [r for g in load(RULES)["groups"] for r in g["rules"] if "alert" in r]


def test_every_alert_is_unit_tested_firing() -> None:
    fired = {
        case["alertname"]
        for test in load(RULE_TESTS)["tests"]
        for case in test.get("alert_rule_test", [])
        if case.get("exp_alerts")
    }
    alerts = {r["alert"] for r in alert_rules()}
    assert alerts - fired == set(), "alerts without a test that makes them fire"
    assert fired - alerts == set(), "tests of alerts that do not exist"
    for rule in alert_rules():
        assert rule["labels"]["severity"] in {"page", "warn"}, rule["alert"]
        assert {"summary", "description"} <= set(rule["annotations"]), rule["alert"]


def test_alerts_use_only_exported_metrics_and_real_config_keys() -> None:
    from strata.shared.config.root import StrataConfig

    exported = exported_names() | DCGM_NAMES | {"up"}
    for rule in alert_rules():
        # Metric names: identifiers followed by a selector, a range or the end of a term.
        names = set(re.findall(r"\b(strata_[a-z0-9_]+|DCGM_[A-Z0-9_]+|up)\b", rule["expr"]))
        assert names, f"{rule['alert']}: no metric"
        assert names <= exported, f"{rule['alert']}: not exported: {sorted(names - exported)}"
        text = " ".join(rule["annotations"].values())
        for key in re.findall(r"\b((?:device|edge|cloud)\.[a-z_]+\.[a-z_]+)\b", text):
            node: Any = StrataConfig()
            for part in key.split("."):
                assert hasattr(node, part), f"{rule['alert']}: no config key {key}"
                node = getattr(node, part)


# --- the Kubernetes config -----------------------------------------------------------------


def kubernetes_jobs() -> list[dict[str, Any]]:
    jobs: list[dict[str, Any]] = load(KUBERNETES_CONFIG)["scrape_configs"]
    return jobs


def test_promtool_checks_the_kubernetes_config_with_static_discovery(tmp_path: Path) -> None:
    config = load(KUBERNETES_CONFIG)
    for job in config["scrape_configs"]:
        assert "kubernetes_sd_configs" in job, f"{job['job_name']}: belongs in prometheus.yml"
        del job["kubernetes_sd_configs"]
        job["static_configs"] = [{"targets": ["10.0.0.1:9102"]}]
    copy = tmp_path / KUBERNETES_CONFIG.name
    copy.write_text(yaml.safe_dump(config))
    (tmp_path / RULES.name).write_text(RULES.read_text())
    out = promtool("check", "config", str(copy))
    assert out.returncode == 0, out.stdout + out.stderr


def test_kubernetes_discovery_watches_the_strata_namespace() -> None:
    objects = render_kustomization()
    namespaces = {o["metadata"]["name"] for o in objects if o["kind"] == "Namespace"}
    for job in kubernetes_jobs():
        assert job["job_name"].startswith("strata"), "the alerts select job=~'strata.*'"
        for sd in job["kubernetes_sd_configs"]:
            assert set(sd) <= {"role", "namespaces", "selectors", "attach_metadata"}, sd
            assert sd["role"] in SD_ROLES
            assert set(sd["namespaces"]["names"]) <= namespaces


def _sanitize(name: str) -> str:
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)


def pod_targets(template: dict[str, Any], ip: str) -> list[dict[str, str]]:
    """The targets Prometheus' pod role discovers for a pod: one per declared container port."""
    meta = template["metadata"]
    base = {"__meta_kubernetes_pod_node_name": "node-1", "__meta_kubernetes_pod_ip": ip}
    for k, v in meta.get("annotations", {}).items():
        base[f"__meta_kubernetes_pod_annotation_{_sanitize(k)}"] = str(v)
    for k, v in meta.get("labels", {}).items():
        base[f"__meta_kubernetes_pod_label_{_sanitize(k)}"] = str(v)
    out = []
    for c in template["spec"]["containers"]:
        for p in c.get("ports", []):
            out.append({**base, "__address__": f"{ip}:{p['containerPort']}"})
    return out


def expand(m: re.Match[str], template: str) -> str:
    """Go's Regexp.Expand, as Prometheus uses it: `$1`, `${1}`, `${name}`; unknown -> ""."""

    def group(ref: re.Match[str]) -> str:
        name = ref.group(1) or ref.group(2)
        if name.isdigit():
            return (m.group(int(name)) if int(name) <= m.re.groups else None) or ""
        return m.groupdict().get(name) or ""

    return re.sub(r"\$\{(\w+)\}|\$(\w+)", group, template)


def relabel(labels: dict[str, str], rules: list[dict[str, Any]]) -> dict[str, str] | None:
    """Prometheus' relabelling (the actions used here); None when the target is dropped."""
    labels = dict(labels)
    for rule in rules:
        action = rule.get("action", "replace")
        regex = re.compile(rule.get("regex", "(.*)"))
        value = rule.get("separator", ";").join(
            labels.get(s, "") for s in rule.get("source_labels", [])
        )
        m = regex.fullmatch(value)  # Prometheus anchors every regex
        if (action == "keep" and m is None) or (action == "drop" and m is not None):
            return None
        if action == "replace" and m is not None:
            result = expand(m, rule.get("replacement", "$1"))
            if result:
                labels[rule["target_label"]] = result
            else:
                labels.pop(rule["target_label"], None)
        elif action not in {"keep", "drop", "replace"}:
            pytest.fail(f"relabel action {action} is not simulated here: extend relabel()")
    return labels


def test_relabelling_scrapes_each_pod_on_its_metrics_port() -> None:
    """Run the job's relabelling on the targets discovery would find for the rendered pods."""
    objects = render_kustomization()
    (job,) = kubernetes_jobs()
    scraped = {}
    for workload, template in pod_templates(objects):
        kept = [relabel(t, job["relabel_configs"]) for t in pod_targets(template, "10.1.2.3")]
        addresses = {t["__address__"] for t in kept if t is not None}
        annotations = template["metadata"].get("annotations", {})
        if annotations.get("prometheus.io/scrape") != "true":
            assert not addresses, f"{object_key(workload)} is scraped without the annotation"
            continue
        metrics_ports = [
            p["containerPort"]
            for c in template["spec"]["containers"]
            for p in c.get("ports", [])
            if p.get("name") == "metrics"
        ]
        assert metrics_ports == [int(annotations["prometheus.io/port"])], object_key(workload)
        assert addresses == {f"10.1.2.3:{metrics_ports[0]}"}, object_key(workload)
        target = next(t for t in kept if t is not None)
        scraped[target["tier"]] = target
    # The pods Kubernetes runs: the edge and the cloud (devices run beside their cameras).
    assert set(scraped) >= {"edge", "cloud"}, scraped
