"""Training the three students (needs the export extra: torch, ultralytics, timm).

Every function imports torch inside, so importing this module stays light. Each runs on the
GPU when there is one, else the CPU, with a progress bar.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from strata.tools.distill.dataset import ImageSet

log = logging.getLogger(__name__)

IMAGENET_MEAN = np.array([0.485, 0.456, 0.406], np.float32)
IMAGENET_STD = np.array([0.229, 0.224, 0.225], np.float32)


def device_name() -> str:
    """'0' (first CUDA GPU) when torch sees one, else 'cpu'."""
    import torch

    return "0" if torch.cuda.is_available() else "cpu"


def offline() -> None:
    """Keep ultralytics and the hub from reaching for the network."""
    os.environ.setdefault("YOLO_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        from ultralytics.utils import SETTINGS

        SETTINGS.update({"sync": False})
    except Exception:  # settings are a nicety; training works without
        pass


@dataclass(frozen=True, slots=True)
class StudentRun:
    """A trained detector checkpoint and how it was trained."""

    weights: Path
    epochs: int
    imgsz: int
    batch: int
    seconds: float
    device: str


def train_student(
    data_yaml: Path,
    out_dir: Path,
    epochs: int,
    imgsz: int = 320,
    batch: int = 8,
    arch: str = "yolov8n.yaml",
    workers: int = 0,
    init: Path | None = None,
    hours: float = 0.0,
    seed: int = 0,
) -> StudentRun:
    """Train YOLOv8n from scratch (no pretrained weights exist here) on the teacher's boxes.

    Plots and AMP are off: both try to download (a font, a checker model). Validation runs
    only at the end, on the validation split carved from the training frames. Tuned for a
    small budget: an optimizer step every batch (nbs = batch; ultralytics otherwise
    accumulates to 64 images), a short warm-up, and no mosaic (one fixed camera: the test
    frames look like the training frames, and mosaic costs time on the main thread).
    `init` starts from an earlier checkpoint's weights (a fresh optimizer and schedule).
    """
    offline()
    from ultralytics import YOLO

    dev = device_name()
    model = YOLO(str(init) if init else arch)
    t0 = time.perf_counter()
    args: dict[str, Any] = {
        "data": str(data_yaml),
        "epochs": epochs,
        "imgsz": imgsz,
        "batch": batch,
        "device": dev,
        "workers": workers,
        "project": str(out_dir),
        "name": "student",
        "exist_ok": True,
        "pretrained": False,
        "amp": False,
        "plots": False,
        "val": False,
        "cache": "ram",
        "seed": seed,
        "deterministic": False,
        "verbose": False,
        "mosaic": 0.0,
        "close_mosaic": 0,
        "nbs": batch,
        "optimizer": "AdamW",
        "lr0": 0.002,
        "warmup_epochs": min(1.0, epochs / 10),
        # ultralytics' 0.1 is for SGD; with AdamW it blows up the head's biases (its 'auto'
        # optimizer choice sets 0 for the same reason).
        "warmup_bias_lr": 0.0,
        "patience": 0,
    }
    if hours > 0:
        args["time"] = hours
    model.train(**args)
    save_dir = Path(model.trainer.save_dir)
    weights = save_dir / "weights" / "last.pt"
    return StudentRun(weights, epochs, imgsz, batch, time.perf_counter() - t0, dev)


@dataclass(frozen=True, slots=True)
class ClassifierRun:
    """A trained binary classifier state dict and its held-out accuracy."""

    state_dict: Path
    epochs: int
    imgsz: int
    seconds: float
    device: str
    test_accuracy: float
    test_samples: int
    train_samples: int


def _to_tensor(x: np.ndarray, size: int) -> Any:
    """uint8 BGR NHWC -> float RGB NCHW normalised like the exported model's manifest."""
    import cv2
    import torch

    if x.shape[1] != size:
        x = np.stack([cv2.resize(i, (size, size), interpolation=cv2.INTER_AREA) for i in x])
    rgb = x[..., ::-1].astype(np.float32) / 255.0
    rgb = (rgb - IMAGENET_MEAN) / IMAGENET_STD
    return torch.from_numpy(np.ascontiguousarray(rgb.transpose(0, 3, 1, 2)))


def build_classifier(
    kind: str, num_classes: int = 2, imgsz: int = 224, swin_size: str = "mini"
) -> Any:
    """The same architectures `strata models build` exports (see shared/models/export.py)."""
    import timm

    if kind == "mobilenetv3_small":
        return timm.create_model("mobilenetv3_small_100", pretrained=False, num_classes=num_classes)
    from strata.tools.models.export import SWIN_SIZES
    from timm.models.swin_transformer import SwinTransformer

    return SwinTransformer(
        img_size=imgsz, window_size=7, num_classes=num_classes, **SWIN_SIZES[swin_size]
    )


def train_classifier(
    kind: str,
    data: ImageSet,
    out: Path,
    epochs: int,
    imgsz: int = 224,
    batch: int = 32,
    lr: float = 2e-3,
    max_steps: int = 0,
    seed: int = 0,
    swin_size: str = "mini",
) -> ClassifierRun:
    """Train a binary classifier (gate or verifier) from scratch with AdamW and flips."""
    import torch
    from tqdm import tqdm

    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    model = build_classifier(kind, 2, imgsz, swin_size).to(dev)
    n = data.train_x.shape[0]
    if n == 0:
        raise ValueError(f"no training samples for the {kind} classifier")
    steps_per_epoch = max(1, (n + batch - 1) // batch)
    total = steps_per_epoch * epochs if max_steps <= 0 else min(max_steps, steps_per_epoch * epochs)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.05)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=total, pct_start=0.1)
    # Balance the classes: the verifier has more people than background crops, or fewer.
    counts = np.bincount(data.train_y, minlength=2).astype(np.float32)
    weight = torch.tensor(counts.sum() / np.maximum(counts, 1.0) / 2.0, device=dev)
    loss_fn = torch.nn.CrossEntropyLoss(weight=weight, label_smoothing=0.05)
    t0 = time.perf_counter()
    step = 0
    model.train()
    with tqdm(total=total, desc=f"train {kind}", unit="step") as bar:
        while step < total:
            order = rng.permutation(n)
            for k in range(0, n, batch):
                if step >= total:
                    break
                idx = order[k : k + batch]
                xb = data.train_x[idx]
                flip = rng.random(len(idx)) < 0.5
                xb = np.where(flip[:, None, None, None], xb[:, :, ::-1], xb)
                # Brightness/contrast jitter: the light changes over a day.
                gain = rng.uniform(0.75, 1.25, (len(idx), 1, 1, 1))
                bias = rng.uniform(-20, 20, (len(idx), 1, 1, 1))
                xb = np.clip(xb.astype(np.float32) * gain + bias, 0, 255).astype(np.uint8)
                x = _to_tensor(xb, imgsz).to(dev)
                y = torch.from_numpy(data.train_y[idx]).to(dev)
                loss = loss_fn(model(x), y)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                sched.step()
                step += 1
                bar.set_postfix(loss=f"{loss.item():.3f}")
                bar.update(1)
    seconds = time.perf_counter() - t0
    model.eval()
    acc = evaluate_classifier(model, data.test_x, data.test_y, imgsz, dev)
    out.parent.mkdir(parents=True, exist_ok=True)
    torch.save(model.state_dict(), out)
    return ClassifierRun(
        out,
        epochs,
        imgsz,
        seconds,
        dev,
        acc,
        int(data.test_y.shape[0]),
        n,
    )


def evaluate_classifier(model: Any, x: np.ndarray, y: np.ndarray, imgsz: int, dev: str) -> float:
    """Top-1 accuracy of a torch classifier on held-out images (nan when there are none)."""
    import torch

    if x.shape[0] == 0:
        return float("nan")
    correct = 0
    with torch.no_grad():
        for k in range(0, x.shape[0], 64):
            logits = model(_to_tensor(x[k : k + 64], imgsz).to(dev))
            correct += int((logits.argmax(1).cpu().numpy() == y[k : k + 64]).sum())
    return float(correct / x.shape[0])
