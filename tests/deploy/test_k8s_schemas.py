"""Every object the kustomization renders, validated against the Kubernetes API schemas
(kubernetes-validate bundles them: offline) of the version we support and the one before."""

from __future__ import annotations

import shutil
import subprocess
from typing import Any

import pytest
import yaml
from deploy_kit import K8S, manifest_files, object_key, pod_templates, render_kustomization
from required_testkit import require_module

kubernetes_validate = require_module(
    "kubernetes_validate", "pip install -e '.[test]' (kubernetes-validate)"
)

# The Kubernetes version deploy/k8s is written for, and one minor version back (managed
# clusters lag a release). Bump both when kubernetes-validate ships the next schemas.
KUBERNETES_VERSIONS = ("1.37", "1.36")


def rendered() -> list[dict[str, Any]]:
    return render_kustomization()


def test_the_kustomization_renders_every_manifest_once() -> None:
    objects = rendered()
    keys = [object_key(o) for o in objects]
    assert len(keys) == len(set(keys)), f"an object is defined twice: {sorted(keys)}"
    # Every manifest file is part of the kustomization (a file left out is never applied).
    listed = {
        (K8S / r).resolve()
        for r in yaml.safe_load((K8S / "kustomization.yaml").read_text())["resources"]
    }
    for path in manifest_files():
        assert path.resolve() in listed or any(p in listed for p in path.resolve().parents), (
            f"{path.relative_to(K8S)} is not in kustomization.yaml's resources"
        )


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_every_object_matches_the_api_schema(version: str) -> None:
    failures = []
    for obj in rendered():
        try:
            # strict: unknown fields are errors too (a misspelt key is silently dropped by
            # `kubectl apply` with a warning only).
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            where = ".".join(str(p) for p in exc.path)
            failures.append(f"{object_key(obj)}: {where}: {exc.message}")
        except kubernetes_validate.SchemaNotFoundError as exc:
            failures.append(f"{object_key(obj)}: {exc.message}")
    assert not failures, f"Kubernetes {version}:\n" + "\n".join(failures)


def test_objects_live_in_the_namespace_and_services_select_pods() -> None:
    objects = rendered()
    namespaces = {o["metadata"]["name"] for o in objects if o["kind"] == "Namespace"}
    for obj in objects:
        if obj["kind"] != "Namespace":
            assert obj["metadata"].get("namespace") in namespaces, (
                f"{object_key(obj)}: not in a namespace the kustomization creates"
            )
    pods = [(w, t) for w, t in pod_templates(objects)]
    for workload, template in pods:
        selector = workload["spec"].get("selector", {}).get("matchLabels")
        if selector is not None:
            labels = template["metadata"]["labels"]
            assert selector.items() <= labels.items(), f"{object_key(workload)}: selector"
    for svc in (o for o in objects if o["kind"] == "Service"):
        sel = svc["spec"].get("selector")
        if not sel:
            continue  # a Service for external endpoints
        matched = [t for w, t in pods if sel.items() <= t["metadata"]["labels"].items()]
        assert matched, f"{object_key(svc)} selects no pod template"
        ports = {
            p.get("name"): p["containerPort"]
            for t in matched
            for c in t["spec"]["containers"]
            for p in c.get("ports", [])
        }
        for port in svc["spec"]["ports"]:
            target = port.get("targetPort", port["port"])
            if isinstance(target, str):
                assert target in ports, f"{object_key(svc)}: targetPort {target} names no port"
            else:
                assert target in ports.values(), f"{object_key(svc)}: no container port {target}"


def test_named_probe_ports_exist() -> None:
    for workload, template in pod_templates(rendered()):
        for c in template["spec"]["containers"]:
            names = {p.get("name") for p in c.get("ports", [])}
            for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
                for handler in c.get(probe, {}).values():
                    port = handler.get("port") if isinstance(handler, dict) else None
                    if isinstance(port, str):
                        assert port in names, f"{object_key(workload)}: {probe} port {port}"


def test_kubectl_kustomize_renders_the_same_objects() -> None:
    """When kubectl is at hand, the Python rendering above is what kubectl produces."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl not installed: the Python rendering is not cross-checked")
    out = subprocess.run(
        [kubectl, "kustomize", str(K8S)], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    theirs = [d for d in yaml.safe_load_all(out.stdout) if d is not None]
    assert sorted(map(object_key, theirs)) == sorted(map(object_key, rendered()))
    by_key = {object_key(o): o for o in rendered()}
    for obj in theirs:
        assert obj == by_key[object_key(obj)], f"{object_key(obj)} renders differently"
