"""What the deploy/ tests share: paths, the real tools (or a skip that says how to get them),
the kustomization rendered the way `kubectl kustomize` does for the features deploy/k8s uses,
and the dashboard's queries."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from required_testkit import require_tool

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "k8s"
PROMETHEUS = DEPLOY / "prometheus"
# The static-target config (checked by promtool) and the Kubernetes one (see
# test_prometheus_config.py for why it is checked another way).
STATIC_CONFIG = PROMETHEUS / "prometheus.yml"
KUBERNETES_CONFIG = PROMETHEUS / "prometheus-kubernetes.yml"
DASHBOARD = DEPLOY / "grafana" / "strata.json"
TIERS = ("device", "edge", "cloud")

HOW_TO_GET = {
    "promtool": "apt-get install prometheus (Debian's package; `bash .ci/system-deps` does it)",
    "prometheus": "apt-get install prometheus (Debian's package; `bash .ci/system-deps` does it)",
    "systemd-analyze": "apt-get install systemd (`bash .ci/system-deps` does it)",
}


def tool(name: str) -> str:
    """The path of a system tool; a skip that says how to get it when missing (a failure in
    CI, where .ci/system-deps installs every tool: required_testkit.py)."""
    return require_tool(name, HOW_TO_GET.get(name, "install it"))


# --- Kubernetes -----------------------------------------------------------------------------

# The kustomization fields the renderer below implements. Anything else makes the test fail
# with a message to extend the renderer, rather than validating something kubectl would not
# produce.
KUSTOMIZE_FIELDS = {"apiVersion", "kind", "resources", "namespace", "labels"}


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def render_kustomization(folder: Path = K8S) -> list[dict[str, Any]]:
    """Every object the kustomization in `folder` yields, as `kubectl kustomize` renders it
    (resources, recursively; namespace; labels without selectors)."""
    kust = _docs(folder / "kustomization.yaml")[0]
    unknown = set(kust) - KUSTOMIZE_FIELDS
    assert not unknown, (
        f"{folder}/kustomization.yaml uses {sorted(unknown)}, which tests/deploy/deploy_kit.py "
        "does not render yet: extend render_kustomization"
    )
    objects: list[dict[str, Any]] = []
    for entry in kust.get("resources", []):
        path = folder / entry
        assert path.exists(), f"{folder}/kustomization.yaml: resource {entry} does not exist"
        objects += render_kustomization(path) if path.is_dir() else _docs(path)
    if "namespace" in kust:
        for obj in objects:
            if obj["kind"] != "Namespace":
                obj.setdefault("metadata", {})["namespace"] = kust["namespace"]
    labels: dict[str, str] = {}
    for group in kust.get("labels", []):
        # includeSelectors/includeTemplates would also rewrite selectors and pod templates.
        assert set(group) <= {"pairs"}, f"labels: {sorted(group)} not rendered here"
        labels.update(group["pairs"])
    if labels:
        for obj in objects:
            obj.setdefault("metadata", {}).setdefault("labels", {}).update(labels)
    return objects


def object_key(obj: dict[str, Any]) -> str:
    """kind/namespace/name, for messages and comparisons."""
    meta = obj.get("metadata", {})
    return f"{obj['kind']}/{meta.get('namespace', '')}/{meta.get('name', '?')}"


def manifest_files(folder: Path = K8S) -> list[Path]:
    """Every YAML file under deploy/k8s except the kustomization itself."""
    return sorted(p for p in folder.rglob("*.yaml") if p.name != "kustomization.yaml")


def pod_templates(objects: list[dict[str, Any]]) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """(workload, pod template) for every object that runs pods."""
    for obj in objects:
        spec = obj.get("spec", {})
        if obj["kind"] == "CronJob":
            yield obj, spec["jobTemplate"]["spec"]["template"]
        elif "template" in spec:
            yield obj, spec["template"]


# --- Grafana --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PanelQuery:
    """One PromQL target of one dashboard panel."""

    panel: str
    ref_id: str
    expr: str

    @property
    def key(self) -> str:
        """`panel title / refId`: how the test names (and exempts) a query."""
        return f"{self.panel} / {self.ref_id}"


def _panels(items: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in items:
        yield panel
        # Collapsed rows keep their panels inside.
        yield from _panels(panel.get("panels", []))


def dashboard() -> dict[str, Any]:
    """The Grafana dashboard as JSON."""
    data: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return data


def dashboard_queries() -> list[PanelQuery]:
    """Every PromQL expression of every panel (rows included), in order."""
    out = []
    for panel in _panels(dashboard()["panels"]):
        for i, target in enumerate(panel.get("targets", [])):
            if target.get("expr"):
                ref = str(target.get("refId") or chr(ord("A") + i))
                out.append(PanelQuery(panel["title"], ref, target["expr"]))
    return out


# Grafana's built-in variables, as Grafana expands them for a 1 s scrape interval (its
# $__rate_interval is at least four scrape intervals).
GRAFANA_BUILTINS = {
    "__rate_interval": "4s",
    "__interval": "1s",
    "__interval_ms": "1000",
    "__range": "60s",
    "__range_s": "60",
    "__range_ms": "60000",
}
_VARIABLE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)|\[\[(\w+)\]\]")


def expand_variables(expr: str) -> str:
    """`expr` with Grafana's variables replaced as Grafana would for an all-values selection."""
    template_vars = {v["name"]: v for v in dashboard().get("templating", {}).get("list", [])}

    def value(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2) or m.group(3)
        if name in GRAFANA_BUILTINS:
            return GRAFANA_BUILTINS[name]
        var = template_vars.get(name)
        assert var is not None, f"{expr!r}: unknown dashboard variable ${name}"
        assert var["type"] in {"query", "custom", "interval", "constant"}, (
            f"{expr!r}: ${name} is a {var['type']} variable; a query cannot use it"
        )
        if var["type"] == "interval":
            return "1m"
        if var["type"] == "constant":
            return str(var["query"])
        return ".*"  # "All": a regex over every value (the panel should use =~)

    return _VARIABLE.sub(value, expr)


# --- metrics --------------------------------------------------------------------------------


def exported_names() -> set[str]:
    """Every sample name the three tiers' metric registries export (labelled or not)."""
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
    # The device's cascade and site gate register on the agent's registry beside its own.
    for cls in (DeviceMetrics, CascadeMetrics, SiteGateMetrics, EdgeMetrics, CloudMetrics):
        registry = CollectorRegistry()
        cls(registry)
        for family in registry.collect():
            names.update(family.name + s for s in suffixes[family.type])
    return names
