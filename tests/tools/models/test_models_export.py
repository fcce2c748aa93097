"""The export path (torch, timm, ultralytics): runs where the export extra is installed.

Each test rebuilds the PyTorch model with the seed `build` uses and checks that ONNX
Runtime, loading through the manifest, computes what PyTorch computes.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from strata.shared.models import ModelRepository
from strata.tools.cli import main

torch = pytest.importorskip("torch")
timm = pytest.importorskip("timm")
pytest.importorskip("ultralytics")

pytestmark = [pytest.mark.export, pytest.mark.slow]
os.environ.setdefault("YOLO_OFFLINE", "1")


def _run(repo: Path, name: str, x: np.ndarray) -> np.ndarray:
    loaded = ModelRepository(repo).open(name)
    (out,) = loaded.runner.run(x)
    loaded.close()
    return out


def test_build_mobilenet_matches_torch(tmp_path: Path) -> None:
    assert main(["models", "build", "mobilenetv3_small", "-r", str(tmp_path),
                 "--imgsz", "64", "--num-classes", "10"]) == 0  # fmt: skip
    m = ModelRepository(tmp_path).manifest("mobilenetv3_small")
    assert m.source.trained is False and "random" in m.source.notes
    assert m.input.shape == (None, 3, 64, 64) and m.num_classes == 10
    torch.manual_seed(0)
    ref = timm.create_model("mobilenetv3_small_100", pretrained=False, num_classes=10).eval()
    x = np.random.default_rng(0).random((2, 3, 64, 64), dtype=np.float32)
    with torch.no_grad():
        want = ref(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(_run(tmp_path, "mobilenetv3_small", x), want, rtol=1e-3, atol=1e-4)


def test_build_yolo_matches_torch_and_has_dynamic_batch(tmp_path: Path) -> None:
    assert main(["models", "build", "yolo", "-r", str(tmp_path), "--name", "det",
                 "--imgsz", "64", "--fp16"]) == 0  # fmt: skip
    m = ModelRepository(tmp_path).manifest("det")
    assert m.task == "detect" and m.output.format == "yolov8" and m.num_classes == 80
    assert m.labels[0] == "person" and m.source.trained is False
    assert "fp16" in m.variants
    x = np.random.default_rng(0).random((3, 3, 64, 64), dtype=np.float32)
    out = _run(tmp_path, "det", x)
    assert out.shape == (3, 84, 8 * 8 + 4 * 4 + 2 * 2)
    from ultralytics import YOLO

    torch.manual_seed(0)
    ref = YOLO("yolov8n.yaml").model.float().eval().fuse(verbose=False)
    with torch.no_grad():
        want = ref(torch.from_numpy(x))[0].numpy()
    np.testing.assert_allclose(out, want, rtol=1e-3, atol=1e-2)
    half = ModelRepository(tmp_path).open("det", variant="fp16")
    (h,) = half.runner.run(x)
    np.testing.assert_allclose(h[:, 4:], out[:, 4:], atol=5e-3)  # class scores


def test_build_swin_matches_torch(tmp_path: Path) -> None:
    assert main(["models", "build", "swin", "-r", str(tmp_path), "--arch", "micro",
                 "--num-classes", "3"]) == 0  # fmt: skip
    m = ModelRepository(tmp_path).manifest("swin")
    assert "micro" in m.source.architecture
    from strata.tools.models.export import SWIN_SIZES
    from timm.models.swin_transformer import SwinTransformer

    torch.manual_seed(0)
    ref = SwinTransformer(img_size=224, window_size=7, num_classes=3, **SWIN_SIZES["micro"]).eval()
    x = np.random.default_rng(0).random((2, 3, 224, 224), dtype=np.float32)
    with torch.no_grad():
        want = ref(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(_run(tmp_path, "swin", x), want, rtol=1e-3, atol=1e-3)


def test_build_from_a_checkpoint_is_labelled_with_it(tmp_path: Path) -> None:
    torch.manual_seed(1)
    model = timm.create_model("mobilenetv3_small_100", pretrained=False, num_classes=4)
    ckpt = tmp_path / "gate.pt"
    torch.save(model.state_dict(), ckpt)
    labels = tmp_path / "labels.txt"
    labels.write_text("empty\nperson\ncar\nbicycle\n")
    assert main(["models", "build", "mobilenetv3_small", "-r", str(tmp_path / "repo"),
                 "--name", "gate", "--weights", str(ckpt), "--labels", str(labels),
                 "--imgsz", "64"]) == 0  # fmt: skip
    m = ModelRepository(tmp_path / "repo").manifest("gate")
    assert m.source.trained is True and m.source.weights == ckpt.name  # never this machine's path
    assert m.labels == ("empty", "person", "car", "bicycle")
    x = np.random.default_rng(0).random((1, 3, 64, 64), dtype=np.float32)
    with torch.no_grad():
        want = model.eval()(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(_run(tmp_path / "repo", "gate", x), want, rtol=1e-3, atol=1e-4)


def test_build_yolo_from_an_ultralytics_checkpoint(tmp_path: Path) -> None:
    from ultralytics.nn.tasks import DetectionModel

    torch.manual_seed(2)
    model = DetectionModel("yolov8n.yaml", nc=3, verbose=False)
    model.names = {0: "person", 1: "car", 2: "bicycle"}
    ckpt = tmp_path / "det3.pt"
    torch.save({"model": model, "train_args": {}}, ckpt)
    assert main(["models", "build", "yolo", "--weights", str(ckpt), "-r", str(tmp_path / "r"),
                 "--imgsz", "64"]) == 0  # fmt: skip
    m = ModelRepository(tmp_path / "r").manifest("yolov8n")
    assert m.labels == ("person", "car", "bicycle") and m.source.trained is True
    x = np.random.default_rng(0).random((2, 3, 64, 64), dtype=np.float32)
    out = _run(tmp_path / "r", "yolov8n", x)
    assert out.shape == (2, 4 + 3, 84)
    with torch.no_grad():
        want = model.float().eval().fuse(verbose=False)(torch.from_numpy(x))[0].numpy()
    np.testing.assert_allclose(out, want, rtol=1e-3, atol=1e-2)


def test_manifest_names_the_checkpoint_not_its_path(tmp_path: Path) -> None:
    torch.manual_seed(1)
    model = timm.create_model("mobilenetv3_small_100", pretrained=False, num_classes=2)
    ckpt = tmp_path / "deep" / "gate.pth"
    ckpt.parent.mkdir()
    torch.save(model.state_dict(), ckpt)
    repo = tmp_path / "repo"
    assert main(["models", "build", "mobilenetv3_small", "-r", str(repo), "--weights", str(ckpt),
                 "--imgsz", "64", "--num-classes", "2"]) == 0  # fmt: skip
    m = ModelRepository(repo).manifest("mobilenetv3_small")
    assert m.source.trained is True and m.source.weights == "gate.pth"
    assert str(tmp_path) not in (repo / "mobilenetv3_small" / "manifest.yaml").read_text()
