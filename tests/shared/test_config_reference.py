from pathlib import Path

from strata.shared.config import reference
from strata.shared.config.root import StrataConfig

ROOT = Path(__file__).resolve().parents[2]


def test_readme_reference_is_up_to_date() -> None:
    text = (ROOT / "README.md").read_text()
    assert reference.splice(text, reference.reference()) == text, (
        "README.md's configuration reference is stale: run "
        "`python -m strata.shared.config.reference --write README.md`"
    )


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
