"""`strata models compare`: detectors of any layouts on one clip, agreement per label."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from strata.shared.models import ModelRepository, load_manifest, save_manifest, starter_repository
from strata.tools.cli import main
from strata.tools.models.compare import CompareRequest, compare


@pytest.fixture
def two_detectors(tmp_path: Path) -> Path:
    """The starter PicoDet-S 416 twice: as itself and under another name."""
    repo = tmp_path / "repo"
    for name in ("picodet_s_416", "again"):
        shutil.copytree(starter_repository() / "picodet_s_416", repo / name)
    m = load_manifest(repo / "again" / "manifest.yaml")
    save_manifest(m.model_copy(update={"name": "again"}), repo / "again")
    return repo


def test_a_detector_agrees_with_itself_on_every_label(two_detectors: Path, vtest_mp4: Path) -> None:
    req = CompareRequest(("picodet_s_416", "again"), vtest_mp4, frames=6, threads=(1,))
    rep = compare(ModelRepository(two_detectors), req)
    assert [r.name for r in rep.results] == ["picodet_s_416", "again"]
    person = next(a for a in rep.results[1].labels if a.label == "person")
    # vtest's walking people, found alike by the same model on the same frames.
    assert person.reference_boxes >= 6 and person.f1 == 1.0
    assert all(a.f1 in (None, 1.0) for a in rep.results[1].labels)
    t = rep.results[0].timings[0]
    assert t.threads == 1 and 0 < t.model_wall_ms <= t.wall_ms
    assert "| again |" in rep.markdown()


def test_the_command_writes_its_tables_and_json(
    two_detectors: Path, vtest_mp4: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "cmp.json"
    argv = ["models", "compare", "picodet_s_416", "again", "-r", str(two_detectors)]
    argv += ["--clip", str(vtest_mp4), "--frames", "4", "--threads", "1", "--labels", "person"]
    assert main([*argv, "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "not ground truth" in text and "| person |" in text
    doc = json.loads(out.read_text())
    assert doc["results"][1]["labels"][0]["label"] == "person"


def test_an_unknown_model_is_refused(two_detectors: Path, vtest_mp4: Path) -> None:
    argv = ["models", "compare", "picodet_s_416", "nope", "-r", str(two_detectors)]
    assert main([*argv, "--clip", str(vtest_mp4), "--frames", "2"]) == 2
