"""`strata models quantize --calibration ... --held-out ...`: INT8 calibrated on the site's
frames, its agreement report, and the refusal below the threshold. Real runs of the
starter PicoDet-S 416 on a few frames (the figures themselves: docs/models.md)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import cv2
import numpy as np
import onnx
import pytest
from required_testkit import require_module
from strata.shared.models import ModelRepository, starter_repository
from strata.shared.vision.boxes import FrameBoxes
from strata.tools.cli import main
from strata.tools.models.int8_engines import LADDER, EngineUnavailableError, head_convs, require
from strata.tools.models.site_int8 import (
    QuantizeRefusedError,
    SiteQuantizeRequest,
    per_label,
    quantize_for_site,
    site_frames,
)

PICODET = "picodet_s_416"


def _request(cal: Path, held: Path, engine: str, threshold: float) -> SiteQuantizeRequest:
    return SiteQuantizeRequest(
        model=PICODET, calibration=(cal,), held_out=(held,), engine=engine,  # type: ignore[arg-type]
        threshold=threshold, calibration_frames=4, held_out_frames=4, timing_runs=2,
        recipes=LADDER[:1],
    )  # fmt: skip


def _assert_report_fields(data: dict[str, object]) -> None:
    for key in (
        "model", "engine", "engine_version", "threshold", "score", "calibration",
        "calibration_frames", "held_out", "held_out_frames", "reference_boxes", "fp32_fps",
        "int8_fps", "speedup", "attempts", "passed", "best_box_f1", "machine",
    ):  # fmt: skip
        assert key in data, key
    attempt = data["attempts"][0]  # type: ignore[index]
    for key in ("recipe", "kept_float", "box_f1", "true_positives", "false_positives",
                "false_negatives", "per_label"):  # fmt: skip
        assert key in attempt, key


def test_refuses_below_the_threshold_and_writes_nothing(
    synthetic_mp4: Path, vtest_mp4: Path, tmp_path: Path
) -> None:
    """A threshold no model can reach (1.01) forces the refusal on a real run."""
    (tmp_path / "out").mkdir()
    into = ModelRepository(tmp_path / "out")
    shipped = ModelRepository(starter_repository()).manifest(PICODET)
    with pytest.raises(QuantizeRefusedError) as exc:
        quantize_for_site(
            ModelRepository(), _request(synthetic_mp4, vtest_mp4, "onnxruntime", 1.01), into
        )
    report = exc.value.report
    assert not report.passed and report.variant == "" and report.files == ()
    assert f"box F1 {report.best.box_f1:.3f}" in str(exc.value)
    assert "under the threshold 1.01" in str(exc.value)
    assert report.held_out_frames == 4 and report.calibration_frames == 4
    assert report.reference_boxes > 0, "PicoDet finds vtest's pedestrians at score 0.5"
    assert report.fp32_fps > 0 and report.int8_fps > 0
    assert report.best.per_label[0].label == "person"
    assert {"Conv_117", "Conv_122", "Conv_127", "Conv_132"} <= set(report.best.kept_float)
    _assert_report_fields(json.loads(report.to_json()))
    assert not (tmp_path / "out" / PICODET).exists(), "a refused model is not written"
    assert ModelRepository(starter_repository()).manifest(PICODET) == shipped


def test_cli_writes_the_variant_and_its_report_when_it_agrees(
    vtest_mp4: Path, synthetic_mp4: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Threshold 0: whatever the agreement, the pass path writes the variant."""
    into = tmp_path / "out"
    rc = main([
        "models", "quantize", str(starter_repository() / PICODET), "--into", str(into),
        "--calibration", str(vtest_mp4), "--held-out", str(synthetic_mp4),
        "--engine", "onnxruntime", "--threshold", "0", "--calibration-frames", "4",
        "--held-out-frames", "4", "--runs", "2", "--report", str(tmp_path / "r.json"),
    ])  # fmt: skip
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "PASSED" in out and "frames/s" in out and "recipe" in out
    repo = ModelRepository(into)
    variant = repo.manifest(PICODET).variants["int8-onnxruntime"]
    assert variant.precision == "int8" and variant.format == "onnx"
    _, _, path = repo.file_of(PICODET, "int8-onnxruntime")  # checksum verified
    assert path.name == "model.int8-onnxruntime.onnx"
    _, _, primary = repo.file_of(PICODET)  # the FP32 file is untouched: its checksum holds
    assert primary.name == "model.onnx" and primary != path
    assert any(n.op_type == "QuantizeLinear" for n in onnx.load(str(path)).graph.node)
    written = json.loads((into / PICODET / "int8_report.json").read_text())
    _assert_report_fields(written)
    assert written["passed"] is True and written["variant"] == "int8-onnxruntime"
    assert json.loads((tmp_path / "r.json").read_text())["passed"] is True


def test_cli_refusal_exits_3_with_the_figure(
    vtest_mp4: Path, synthetic_mp4: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """OpenVINO + NNCF, a deliberately bad calibration (synthetic shapes, 4 frames) and a
    threshold of 1.01: exit 3, the figure on stderr, nothing written."""
    require_module("nncf", "pip install 'strata[quantize]'")
    require_module("openvino", "pip install 'strata[quantize]'")
    into = tmp_path / "out"
    rc = main([
        "models", "quantize", PICODET, "--into", str(into), "--calibration",
        str(synthetic_mp4), "--held-out", str(vtest_mp4), "--engine", "openvino",
        "--threshold", "1.01", "--calibration-frames", "4", "--held-out-frames", "4",
        "--runs", "2",
    ])  # fmt: skip
    captured = capsys.readouterr()
    assert rc == 3
    assert "refused: INT8 box F1" in captured.err and "REFUSED" in captured.out
    assert "openvino" in captured.out and "nncf" in captured.out
    assert not (into / PICODET).exists()


def test_missing_openvino_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, vtest_mp4: Path, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    # A None entry makes `import nncf` raise ImportError, as on a host without the extra.
    monkeypatch.setitem(sys.modules, "nncf", None)
    with pytest.raises(EngineUnavailableError, match=r"pip install 'strata\[quantize\]'"):
        require("openvino")
    rc = main(["models", "quantize", PICODET, "--into", str(tmp_path), "--calibration",
               str(vtest_mp4), "--held-out", str(tmp_path), "--engine", "openvino"])  # fmt: skip
    assert rc == 2
    assert "strata[quantize]" in capsys.readouterr().err


def test_held_out_must_not_be_a_calibration_source(vtest_mp4: Path) -> None:
    req = SiteQuantizeRequest(PICODET, (vtest_mp4,), (vtest_mp4,), engine="onnxruntime")
    with pytest.raises(ValueError, match="did not see"):
        quantize_for_site(ModelRepository(), req)


def test_the_shipped_openvino_int8_agrees_with_fp32(vtest_mp4: Path) -> None:
    """The starter's int8-openvino variant (made by the command docs/models.md names):
    checksums verified, kept-in-float convs recorded, and its boxes on vtest frames agree
    with the FP32 model's at the documented threshold."""
    require_module("openvino", "pip install 'strata[openvino]'")
    from strata.shared.vision.agreement import agreement
    from strata.shared.vision.nms import Thresholds
    from strata.tools.models.int8_engines import OpenVinoEngine
    from strata.tools.models.site_int8 import detect, edge_batch

    repo = ModelRepository(starter_repository())
    manifest, _, xml = repo.file_of(PICODET, "int8-openvino")
    variant = manifest.variants["int8-openvino"]
    assert variant.format == "openvino" and variant.precision == "int8"
    report = json.loads((xml.parent / "int8_report.json").read_text())
    assert report["passed"] is True and report["best_box_f1"] >= report["threshold"] == 0.95
    assert "Conv_1" in report["attempts"][-1]["float_convs"]
    assert any("fused into HardSwish" in n for n in report["notes"])
    _, _, src = repo.file_of(PICODET)
    outputs = manifest.output.names
    fp32 = OpenVinoEngine(src, outputs, 0).fp32()
    int8 = OpenVinoEngine(xml, outputs, 0).fp32()  # the IR as it is: its INT8 ops kept
    batch, plans = edge_batch(manifest, site_frames([vtest_mp4], 12))
    th = Thresholds(0.5, 0.45, 300)
    ref = detect(fp32, manifest, batch, plans, th)
    got = detect(int8, manifest, batch, plans, th)
    a = agreement(ref, got)
    assert a.true_positives > 50, "vtest's pedestrians are found"
    assert a.f1 >= 0.95, a


def test_head_convs_of_picodet() -> None:
    model = onnx.load(str(starter_repository() / PICODET / "model.onnx"))
    convs, tail = head_convs(model, 1)
    assert convs == ["Conv_117", "Conv_122", "Conv_127", "Conv_132"]
    assert {"Split_13", "Sigmoid_3"} <= set(tail) and not any(t.startswith("Conv") for t in tail)
    deeper, _ = head_convs(model, 5)
    assert len(deeper) == 20 and set(convs) < set(deeper)


def test_per_label_recall() -> None:
    box = np.array([[0, 0, 10, 10]], np.float32)
    person = FrameBoxes(box, np.array([0.9], np.float32), np.array([0], np.int32))
    car = FrameBoxes(box + 50, np.array([0.9], np.float32), np.array([2], np.int32))
    both = FrameBoxes(
        np.concatenate([person.boxes, car.boxes]),
        np.array([0.9, 0.9], np.float32),
        np.array([0, 2], np.int32),
    )
    rows = per_label(["person", "bicycle", "car"], [both, both], [person, both])
    assert [(r.label, r.reference, r.matched) for r in rows] == [
        ("person", 2, 2),
        ("car", 2, 1),
    ]
    assert rows[1].recall == pytest.approx(0.5)


def test_site_frames_from_a_folder_of_kept_frames(tmp_path: Path, synthetic_mp4: Path) -> None:
    for i in range(6):
        cv2.imwrite(str(tmp_path / f"{i:03d}.jpg"), np.full((48, 64, 3), i * 40, np.uint8))
    frames = site_frames([tmp_path, synthetic_mp4], 6)
    assert len(frames) == 6
    assert frames[0].shape == (48, 64, 3) and frames[-1].shape == (240, 320, 3)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match=r"no \.jpg"):
        site_frames([tmp_path / "empty"], 2)
