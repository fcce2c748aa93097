from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml
from models_testkit import classifier_manifest, tiny_classifier
from strata.shared.models import (
    ModelError,
    ModelRepository,
    load_manifest,
    save_manifest,
    starter_repository,
)
from strata.shared.runtime import ModelLoadError

STARTERS = (
    "mobilenetv2_imagenet",
    "mobilenetv3_small",
    "mobilenetv3_small_imagenet",
    "osnet_x0_25_msmt17",
    "picodet_s_416",
    "yolov8n",
)
# Run only through a cut at its pool (device/filters/site_gate.py), which makes the batch axis
# dynamic; its classifier's Reshape is fixed at one, so the whole file runs one frame at a
# time. tests/device/test_site_gate.py checks the cut's dynamic batch.
BACKBONES = ("mobilenetv3_small_imagenet",)
WHOLE = tuple(n for n in STARTERS if n not in BACKBONES)


def test_default_repository_is_the_starter_one() -> None:
    repo = ModelRepository()
    assert repo.root == starter_repository()
    assert repo.names() == sorted(STARTERS)
    assert ModelRepository("").root == starter_repository()


def test_starter_repository_is_under_40_mb_and_labelled_untrained() -> None:
    total = sum(p.stat().st_size for p in starter_repository().rglob("*") if p.is_file())
    assert total < 40 * 1024 * 1024
    repo = ModelRepository()
    for name in STARTERS:
        m = repo.manifest(name)
        if name in BACKBONES:
            assert m.source.trained is (m.source.weights != "")
            continue
        # Until trained weights replace them, the manifest must say so.
        assert m.source.trained is (m.source.weights != "")
        assert m.input.shape[0] is None, "dynamic batch"


@pytest.mark.parametrize("name", WHOLE)
def test_starter_models_run_in_onnxruntime(name: str) -> None:
    loaded = ModelRepository().open(name, threads=1)
    m = loaded.manifest
    batch = np.random.default_rng(0).random((2, *m.input.shape[1:]), dtype=np.float32)
    outs = loaded.runner.run(batch)
    assert len(outs) == len(m.output.all_names)
    out = outs[0]
    if m.output.format == "yolov8":
        assert out.shape[:2] == (2, 4 + m.num_classes)
        assert out.shape[2] > 0
    elif m.output.format == "gfl":
        # Per level a class map [N, A, C] and a box map [N, A, 4 * (reg_max + 1)].
        assert {o.shape[2] for o in outs} == {m.num_classes, 4 * (m.output.reg_max + 1)}
        assert all(o.shape[0] == 2 for o in outs), "dynamic batch"
    elif m.output.format == "embedding":
        assert out.shape == (2, 512)
    else:
        assert out.shape == (2, m.num_classes)
    assert all(np.isfinite(o).all() for o in outs)
    loaded.close()


def test_open_tiny_model(tiny_repo: Path) -> None:
    loaded = ModelRepository(tiny_repo).open("tiny")
    assert loaded.variant == "fp32"
    (out,) = loaded.runner.run(np.zeros((3, 3, 16, 16), np.float32))
    assert out.shape == (3, 3)


def test_missing_model_names_the_known_ones(tiny_repo: Path) -> None:
    with pytest.raises(ModelError, match=r"'nope' not found .*models: tiny"):
        ModelRepository(tiny_repo).open("nope")


def test_missing_file_is_a_clear_error(tiny_repo: Path) -> None:
    (tiny_repo / "tiny" / "model.onnx").unlink()
    with pytest.raises(ModelError, match=r"'tiny' \(fp32\): file .*model.onnx is missing"):
        ModelRepository(tiny_repo).open("tiny")


def test_checksum_mismatch_is_a_clear_error(tiny_repo: Path) -> None:
    path = tiny_repo / "tiny" / "model.onnx"
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(ModelError, match="checksum mismatch"):
        ModelRepository(tiny_repo).open("tiny")
    # ModelError is a ModelLoadError, so callers of the runtime catch it too.
    assert issubclass(ModelError, ModelLoadError)


def test_input_shape_disagreeing_with_manifest_fails_at_load(tiny_repo: Path) -> None:
    folder = tiny_repo / "tiny"
    m = classifier_manifest("tiny", folder / "model.onnx", size=32)
    save_manifest(m, folder)
    with pytest.raises(ModelError, match=r"shape \[N, 3, 16, 16\] disagrees .*\[N, 3, 32, 32\]"):
        ModelRepository(tiny_repo).open("tiny")


def test_fixed_batch_model_cannot_honour_a_dynamic_manifest(tiny_repo: Path) -> None:
    folder = tiny_repo / "tiny"
    tiny_classifier(folder / "model.onnx", dynamic=False)
    save_manifest(classifier_manifest("tiny", folder / "model.onnx"), folder)
    with pytest.raises(ModelError, match="at axis 0"):
        ModelRepository(tiny_repo).open("tiny")


def test_label_count_must_match_the_output(tiny_repo: Path) -> None:
    folder = tiny_repo / "tiny"
    tiny_classifier(folder / "model.onnx", classes=5)
    save_manifest(classifier_manifest("tiny", folder / "model.onnx", classes=3), folder)
    with pytest.raises(ModelError, match=r"not \[N, 3\] for the manifest's 3 labels"):
        ModelRepository(tiny_repo).open("tiny")


def test_unknown_key_names_file_line_and_key(tiny_repo: Path) -> None:
    path = tiny_repo / "tiny" / "manifest.yaml"
    data = yaml.safe_load(path.read_text())
    data["input"]["colour_order"] = "RGB"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(ModelError, match=r"manifest.yaml:\d+: input.colour_order: unknown key"):
        ModelRepository(tiny_repo).manifest("tiny")


def test_bad_values_are_named(tiny_repo: Path) -> None:
    path = tiny_repo / "tiny" / "manifest.yaml"
    data = yaml.safe_load(path.read_text())
    data["input"]["shape"] = [None, 3, 16]
    data["task"] = "segment"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(ModelError) as err:
        ModelRepository(tiny_repo).manifest("tiny")
    assert "input.shape" in str(err.value)
    assert "task" in str(err.value)


def test_folder_and_manifest_name_must_agree(tiny_repo: Path) -> None:
    (tiny_repo / "tiny").rename(tiny_repo / "other")
    with pytest.raises(ModelError, match="must agree"):
        ModelRepository(tiny_repo).manifest("other")


def test_unknown_variant(tiny_repo: Path) -> None:
    with pytest.raises(ModelError, match=r"no variant 'int8' \(has: fp32\)"):
        ModelRepository(tiny_repo).open("tiny", variant="int8")


def test_manifest_round_trips(tiny_repo: Path) -> None:
    path = tiny_repo / "tiny" / "manifest.yaml"
    m = load_manifest(path)
    save_manifest(m, tiny_repo / "tiny")
    assert load_manifest(path) == m


def test_detect_manifest_needs_a_detection_layout(tiny_repo: Path) -> None:
    path = tiny_repo / "tiny" / "manifest.yaml"
    data = yaml.safe_load(path.read_text())
    data["task"] = "detect"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(ModelError, match="needs a detection layout"):
        ModelRepository(tiny_repo).manifest("tiny")


def test_repository_must_exist(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="is not a folder"):
        ModelRepository(tmp_path / "absent")


def test_tiny_classifier_helper_is_deterministic(tmp_path: Path) -> None:
    tiny_classifier(tmp_path / "a.onnx")
    tiny_classifier(tmp_path / "b.onnx")
    assert (tmp_path / "a.onnx").read_bytes() == (tmp_path / "b.onnx").read_bytes()


def test_starter_files_are_package_data() -> None:
    import fnmatch
    import tomllib

    root = Path(__file__).resolve().parents[3]
    cfg = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]
    for path in starter_repository().rglob("*"):
        if path.is_file():
            rel = path.parent.relative_to(root / "shared").parts
            package = ".".join(("strata", "shared", *rel))
            assert package in cfg["packages"], f"{package} is not listed in packages"
            patterns = cfg["package-data"].get(package, [])
            assert any(fnmatch.fnmatch(path.name, p) for p in patterns), (
                f"{path.relative_to(root)} would miss the wheel"
            )


def test_a_name_the_repository_lacks_is_served_by_the_starter_repository(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from strata.shared.models import repository_for

    (tmp_path / "own").mkdir()
    tiny_classifier(tmp_path / "own" / "model.onnx")
    save_manifest(classifier_manifest("own", tmp_path / "own" / "model.onnx"), tmp_path / "own")
    starter_name = ModelRepository().names()[0]
    with caplog.at_level("INFO", logger="strata.shared.models.repository"):
        served = repository_for(tmp_path, starter_name, "device.gate.model")
    assert served.root == starter_repository()
    assert f"model {starter_name!r}: not in repository {tmp_path}" in caplog.text
    assert repository_for(tmp_path, "own", "device.gate.model").root == tmp_path
    assert repository_for("", starter_name, "device.gate.model").root == starter_repository()
    with pytest.raises(ModelError) as err:
        repository_for(tmp_path, "nope", "cloud.model.name")
    text = str(err.value)
    assert f"not found in repository {tmp_path} (models: own) nor in the starter" in text
    assert f"`strata models import nope FILE -r {tmp_path}`" in text
    assert "or set cloud.model.name" in text
