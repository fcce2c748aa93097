"""Every YAML file under deploy/ through yamllint, with the repository's .yamllint.yaml."""

from __future__ import annotations

import subprocess
import sys

from deploy_kit import DEPLOY, ROOT
from required_testkit import require_module

require_module("yamllint", "pip install -e '.[test]' (yamllint)")


def test_deploy_yaml_is_lint_clean() -> None:
    files = sorted(str(p.relative_to(ROOT)) for p in DEPLOY.rglob("*.y*ml"))
    assert files
    out = subprocess.run(
        [sys.executable, "-m", "yamllint", "-c", ".yamllint.yaml", "-f", "parsable", *files],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stdout + out.stderr
