import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_package_is_listed_for_the_wheel() -> None:
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(cfg["packages"])
    found = set()
    for tier in ("shared", "device", "edge", "cloud", "tools"):
        for init in (ROOT / tier).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT).parts
            found.add(".".join(("strata", *rel)))
    assert found - listed == set(), "add these to [tool.setuptools] packages"
