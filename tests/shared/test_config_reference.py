from pathlib import Path

from strata.shared.config import reference
from strata.shared.config.root import StrataConfig

ROOT = Path(__file__).resolve().parents[2]


def test_docs_config_reference_is_up_to_date() -> None:
    text = (ROOT / "docs" / "config.md").read_text()
    assert reference.splice(text, reference.reference()) == text, (
        "docs/config.md's configuration reference is stale: run "
        "`python -m strata.shared.config.reference --write docs/config.md`"
    )


def test_the_per_camera_rules_keys_are_listed() -> None:
    from strata.shared.config.rules import CameraRules, DwellRule, LineRule, ZoneRule

    body = reference.reference()
    assert "| `rules.cameras` | dict[str, CameraRules] |" in body
    for name in CameraRules.model_fields:
        assert f"| `rules.cameras.<id>.{name}" in body  # a leaf, or a section's leaves
    for kind, model in (("zones", ZoneRule), ("lines", LineRule), ("dwell", DwellRule)):
        for name in model.model_fields:
            assert f"| `rules.cameras.<id>.{kind}[].{name}` |" in body
    assert "| `rules.cameras.<id>.zones[].min_area` |" in body
    assert "| `rules.cameras.<id>.stationary.max_movement` |" in body


def test_every_leaf_option_is_documented() -> None:
    body = reference.reference()
    opts = list(reference.options(StrataConfig))
    assert len(opts) >= 6
    for opt in opts:
        assert f"| `{opt.key}` |" in body
        assert opt.description, f"{opt.key} has no description"


def test_check_flags_a_stale_file(tmp_path: Path) -> None:
    stale = tmp_path / "README.md"
    stale.write_text(f"# x\n{reference.BEGIN}\nold\n{reference.END}\n")
    assert reference.main(["--check", str(stale)]) == 1
    assert reference.main(["--write", str(stale)]) == 0
    assert reference.main(["--check", str(stale)]) == 0
    assert "| `logging.level` |" in stale.read_text()
