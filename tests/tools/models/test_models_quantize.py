from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from models_testkit import detector_manifest, tiny_detector
from strata.shared.models import ModelError, ModelRepository, save_manifest, starter_repository
from strata.tools.cli import main
from strata.tools.models.agreement import agreement
from strata.tools.models.fp16 import add_fp16_variant
from strata.tools.models.quantize import QuantizeRequest, float_nodes, quantize, read_frames


@pytest.mark.parametrize("method", ["minmax", "entropy", "percentile"])
def test_quantize_tiny_classifier(tiny_repo: Path, synthetic_mp4: Path, method: str) -> None:
    repo = ModelRepository(tiny_repo)
    req = QuantizeRequest(
        name="tiny", clip=synthetic_mp4, method=method, samples=6, eval_frames=6,
        timing_runs=3, progress=False,
    )  # fmt: skip
    rep = quantize(repo, req)
    assert rep.agreement.metric == "top1"
    assert rep.agreement.value is not None and 0.0 <= rep.agreement.value <= 1.0
    assert rep.agreement.frames == 6
    assert rep.float_timing.median_ms > 0 and rep.int8_timing.median_ms > 0
    m = repo.manifest("tiny")
    cal = m.variants["int8"].calibration
    assert cal is not None and cal.method == method and cal.samples == 6
    # The INT8 file really is quantized and loads through the manifest.
    graph = onnx.load(str(rep.path)).graph
    assert any(n.op_type == "QuantizeLinear" for n in graph.node)
    loaded = repo.open("tiny", variant="int8")
    (out,) = loaded.runner.run(np.zeros((2, 3, 16, 16), np.float32))
    assert out.shape == (2, 3)


def test_quantize_detector_keeps_decode_tail_in_float(tmp_path: Path, synthetic_mp4: Path) -> None:
    folder = tmp_path / "det"
    folder.mkdir()
    tiny_detector(folder / "model.onnx")
    save_manifest(detector_manifest("det", folder / "model.onnx"), folder)
    model = onnx.load(str(folder / "model.onnx"))
    tail = float_nodes(model, (), "", "detect")
    assert "head_conv" not in tail
    assert {"tail_concat", "tail_cls_sigmoid", "tail_split"} <= set(tail)
    rep = quantize(
        ModelRepository(tmp_path),
        QuantizeRequest(name="det", clip=synthetic_mp4, samples=4, eval_frames=4, conf=0.3,
                        timing_runs=2, method="minmax", progress=False),
    )  # fmt: skip
    assert rep.agreement.metric == "box_f1"
    assert rep.kept_float_nodes >= 3
    assert rep.agreement.reference_items > 0, "the tiny detector should fire at conf 0.3"
    assert rep.agreement.value is not None and 0.0 <= rep.agreement.value <= 1.0


def test_agreement_metrics(tmp_path: Path) -> None:
    folder = tmp_path / "det"
    folder.mkdir()
    tiny_detector(folder / "model.onnx")
    m = detector_manifest("det", folder / "model.onnx")
    out = np.zeros((2, 6, 16), np.float32)
    out[:, :4, 0] = [10, 10, 8, 8]
    out[:, 4, 0] = 0.9
    out[:, :4, 1] = [25, 25, 6, 6]
    out[:, 5, 1] = 0.8
    same = agreement(m, out, out.copy(), conf=0.25, iou=0.45)
    assert same.value == pytest.approx(1.0) and same.reference_items == 4
    moved = out.copy()
    moved[1, 0, 0] += 6  # second image, first box: IoU with the original < 0.5
    half = agreement(m, out, moved, conf=0.25, iou=0.45)
    assert half.value == pytest.approx(2 * 3 / 8)
    none = agreement(m, np.zeros_like(out), np.zeros_like(out), conf=0.25, iou=0.45)
    assert none.value is None


def test_read_frames_spreads_over_the_clip(synthetic_mp4: Path) -> None:
    frames = read_frames(synthetic_mp4, 5)
    assert len(frames) == 5
    assert frames[0].shape == (240, 320, 3)
    with pytest.raises(FileNotFoundError):
        read_frames(synthetic_mp4.with_name("absent.mp4"), 2)


def test_fp16_variant_follows_fp32(tiny_repo: Path) -> None:
    add_fp16_variant(tiny_repo, "tiny")
    repo = ModelRepository(tiny_repo)
    x = np.random.default_rng(0).random((2, 3, 16, 16), dtype=np.float32)
    (ref,) = repo.open("tiny").runner.run(x)
    half = repo.open("tiny", variant="fp16")
    assert half.manifest.variants["fp16"].precision == "fp16"
    (out,) = half.runner.run(x)
    np.testing.assert_allclose(out, ref, rtol=2e-2, atol=2e-2)


def test_cli_quantize_into_another_repository(
    tiny_repo: Path, synthetic_mp4: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    into = tmp_path / "out"
    rc = main(["models", "quantize", "tiny", "-r", str(tiny_repo), "--into", str(into),
               "--clip", str(synthetic_mp4), "--samples", "4", "--eval-frames", "4",
               "--runs", "2", "--method", "minmax"])  # fmt: skip
    assert rc == 0
    out = capsys.readouterr().out
    assert "top-1 agreement" in out and "latency" in out
    assert "int8" in ModelRepository(into).manifest("tiny").variants
    assert "int8" not in ModelRepository(tiny_repo).manifest("tiny").variants


def test_cli_never_writes_into_the_starter_repository(
    synthetic_mp4: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["models", "quantize", "mobilenetv2_imagenet", "--clip", str(synthetic_mp4)])
    assert exc.value.code == 2
    assert "--into" in capsys.readouterr().err
    assert ModelRepository(starter_repository()).manifest("mobilenetv2_imagenet").variants == {}


def test_quantize_missing_clip_is_clear(tiny_repo: Path, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="calibration clip"):
        quantize(
            ModelRepository(tiny_repo),
            QuantizeRequest(name="tiny", clip=tmp_path / "none.mp4", progress=False),
        )
    with pytest.raises(ModelError, match="not found"):
        quantize(
            ModelRepository(tiny_repo),
            QuantizeRequest(name="nope", clip=tmp_path / "none.mp4", progress=False),
        )


@pytest.mark.slow
def test_quantize_starter_mobilenet(synthetic_mp4: Path, tmp_path: Path) -> None:
    rep = quantize(
        ModelRepository(),
        QuantizeRequest(name="mobilenetv3_small", clip=synthetic_mp4, samples=4,
                        eval_frames=4, timing_runs=3, method="minmax", progress=False),
        into=ModelRepository(tmp_path),
    )  # fmt: skip
    assert rep.int8_bytes < rep.float_bytes / 2
    assert ModelRepository(tmp_path).open("mobilenetv3_small", variant="int8").variant == "int8"


def test_promoted_int8_loads_by_name(
    tiny_repo: Path, synthetic_mp4: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc = main(["models", "quantize", "tiny", "-r", str(tiny_repo), "--clip", str(synthetic_mp4),
               "--samples", "3", "--eval-frames", "3", "--runs", "1", "--method", "minmax",
               "--as-model", "tiny-int8"])  # fmt: skip
    assert rc == 0
    repo = ModelRepository(tiny_repo)
    m = repo.manifest("tiny-int8")
    assert m.precision == "int8" and m.variants == {}
    assert m.sha256 == repo.manifest("tiny").variants["int8"].sha256
    assert "promoted from tiny:int8" in m.source.made_by
    loaded = repo.open("tiny-int8")
    assert loaded.runner.run(np.zeros((1, 3, 16, 16), np.float32))[0].shape == (1, 3)
    assert main(["models", "promote", "tiny", "-r", str(tiny_repo), "--variant", "fp16",
                 "--as", "x"]) == 2  # fmt: skip
    assert "no variant 'fp16'" in capsys.readouterr().err


def test_calibration_stride_divides_the_samples() -> None:
    from strata.tools.models.quantize import calibration_stride

    assert [calibration_stride(n) for n in (1, 2, 6, 7, 8, 9, 32)] == [1, 2, 3, 1, 4, 3, 4]


def test_each_variant_key_has_its_own_file(tiny_repo: Path, synthetic_mp4: Path) -> None:
    repo = ModelRepository(tiny_repo)
    for method, key in (("minmax", "int8"), ("percentile", "int8-pct")):
        quantize(repo, QuantizeRequest(name="tiny", clip=synthetic_mp4, method=method, samples=3,
                                       eval_frames=2, timing_runs=1, variant=key,
                                       progress=False))  # fmt: skip
    m = repo.manifest("tiny")
    assert m.variants["int8"].file != m.variants["int8-pct"].file
    for key in ("int8", "int8-pct"):
        assert repo.open("tiny", variant=key).variant == key  # both checksums still hold
    with pytest.raises(ValueError, match="variant key"):
        m.model_validate({**m.model_dump(), "variants": {"../x": m.variants["int8"].model_dump()}})


def test_auto_method_keeps_the_best_calibrator(
    tiny_repo: Path, synthetic_mp4: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc = main(["models", "quantize", "tiny", "-r", str(tiny_repo), "--clip", str(synthetic_mp4),
               "--samples", "4", "--eval-frames", "4", "--runs", "1",
               "--method", "auto"])  # fmt: skip
    assert rc == 0
    out = capsys.readouterr().out
    assert "tried            entropy" in out and "minmax" in out and "percentile" in out
    m = ModelRepository(tiny_repo).manifest("tiny")
    cal = m.variants["int8"].calibration
    assert cal is not None and cal.method in ("entropy", "minmax", "percentile")
    assert sorted(p.name for p in (tiny_repo / "tiny").glob("*.onnx")) == [
        "model.int8.onnx",
        "model.onnx",
    ]
