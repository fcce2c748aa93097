"""The bench's detector: a repository model, resolved once and named in the report."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from strata.shared.config import load_config
from strata.shared.models import ModelError, starter_repository
from strata.tools.bench.clip_args import CLIPS, clips_of
from strata.tools.bench.detector import resolve
from strata.tools.cascade_clips import RECIPES


def test_the_starter_detector_is_the_default_and_named() -> None:
    d = resolve()
    # The COCO detector (issue 38), not the vtest-distilled one.
    assert (d.name, d.version, d.input_width, d.input_height) == ("picodet_s_416", 0, 416, 416)
    assert d.path.is_file() and len(d.labels) == 80 and d.labels[0] == "person"
    info = d.describe()
    assert info["input_size"] == [416, 416] and info["sha256"] == d.sha256
    assert d.one_line() == "picodet_s_416 v0 (416x416, fp32)"
    # The edge loads that file with its labels; the overrides validate as config.
    model = load_config(None, d.overrides()).edge.model
    assert (model.path, model.name) == (str(d.path), "picodet_s_416")
    assert tuple(model.labels) == d.labels


def test_a_users_repository_and_its_latest_version(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    shutil.copytree(starter_repository() / "yolov8n", repo / "mydet")
    manifest = repo / "mydet" / "manifest.yaml"
    manifest.write_text(manifest.read_text().replace("name: yolov8n", "name: mydet"))
    shutil.copytree(repo / "mydet", tmp_path / "v1")
    shutil.move(str(tmp_path / "v1"), str(repo / "mydet" / "1"))
    d = resolve(str(repo), "mydet")
    assert (d.name, d.version) == ("mydet", 1)
    assert d.repository == str(repo.resolve()) and d.path.parent.name == "1"
    with pytest.raises(ModelError, match="not found in repository"):
        resolve(str(repo), "nothere")


def test_clip_choices_follow_the_recipes() -> None:
    assert ("vtest", *RECIPES) == CLIPS
    assert clips_of(None) == clips_of(["all"]) == CLIPS
    assert clips_of(["pans", "vtest"]) == ("vtest", "pans")


def test_the_cascade_run_can_send_raw_pixels_to_leave_the_codec_out() -> None:
    import argparse

    from strata.tools.bench.cascade import cascade_config
    from strata.tools.bench.clip_args import add_encoding_argument

    p = argparse.ArgumentParser()
    add_encoding_argument(p)
    assert p.parse_args([]).encoding == "jpeg"
    assert p.parse_args(["--encoding", "bgr"]).encoding == "bgr"
    # The device's config takes it as the reference run's payload.
    cfg = load_config(None, cascade_config("bgr")).device
    assert cfg.sender.encoding == "bgr"
