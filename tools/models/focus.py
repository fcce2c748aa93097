"""A Focus stem (space-to-depth by strided slices, then a conv) as one strided conv.

YOLOX (and YOLOv5 before v6) start with `Focus`: the image sliced into its four 2x2 phases
(`x[..., dy::2, dx::2]`, each two Slice ops), concatenated on channels, then a k x k conv
of stride 1. OpenVINO's CPU plugin runs those 8 slices in its reference kernel: 2.9 of
18.8 ms of YOLOX-nano INT8 on this machine (docs/models.md). The same numbers come out of
one 2k x 2k conv of stride 2 on the image itself, padded 2p where the k x k conv was
padded p (what YOLOv5 v6 did to its own stem):

    W2[o, c, 2 ky + dy, 2 kx + dx] = W[o, phase(dy, dx) * C + c, ky, kx]

Exact: every output is the same sum of the same products (tests: the rewritten graph
against the original on real frames).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from strata.tools.models.onnx_graph import (
    constant_values,
    producers,
    reads,
    replace_nodes,
    rewrite_file,
)

BIG = 2**31 - 1  # a Slice end at or past this reads to the end of the axis


@dataclass(frozen=True, slots=True)
class FocusFold:
    """One folded Focus: its concat, the conv that now reads the image, the kernel size."""

    concat: str
    conv: str
    kernel: int


def _step2(node: Any, values: dict[str, np.ndarray]) -> tuple[int, int] | None:
    """(axis, start) of a Slice taking every second element of one axis to its end."""
    if node.op_type != "Slice" or len(node.input) < 5:
        return None
    parts = [values.get(i) for i in node.input[1:5]]
    if any(p is None or p.size != 1 for p in parts):
        return None
    start, end, axis, step = (int(p.ravel()[0]) for p in parts if p is not None)
    if step != 2 or end < BIG or axis not in (2, 3, -1, -2) or start not in (0, 1):
        return None
    return (axis % 4, start)


def _phase(
    tensor: str, writers: dict[str, Any], values: dict[str, np.ndarray]
) -> tuple[str, int, int] | None:
    """(source, dy, dx) when `tensor` is Slice(Slice(source)) of steps 2 on H and W."""
    outer = writers.get(tensor)
    if outer is None:
        return None
    inner = writers.get(outer.input[0])
    a, b = _step2(outer, values), (None if inner is None else _step2(inner, values))
    if a is None or b is None or a[0] == b[0] or inner is None:
        return None
    starts = dict((a, b))
    return inner.input[0], starts[2], starts[3]


def _conv_attrs(conv: Any) -> dict[str, Any]:
    import onnx

    return {a.name: onnx.helper.get_attribute_value(a) for a in conv.attribute}


def _plain(conv: Any, k: int) -> int | None:
    """The conv's padding p when it is k x k, stride 1, group 1, undilated, padded p on
    every side; else None."""
    a = _conv_attrs(conv)
    pads = list(a.get("pads", [0, 0, 0, 0]))
    if a.get("group", 1) != 1 or list(a.get("strides", [1, 1])) != [1, 1]:
        return None
    if list(a.get("dilations", [1, 1])) != [1, 1] or a.get("auto_pad", b"NOTSET") not in (
        b"NOTSET",
        "NOTSET",
    ):
        return None
    if len(set(pads)) != 1 or list(a.get("kernel_shape", [k, k])) != [k, k]:
        return None
    return int(pads[0])


def _weight(w: np.ndarray, order: list[tuple[int, int]]) -> np.ndarray:
    """The 2k x 2k image-space weight of a k x k conv on the concatenated phases."""
    o, c4, k, _ = w.shape
    c = c4 // 4
    out = np.zeros((o, c, 2 * k, 2 * k), w.dtype)
    for i, (dy, dx) in enumerate(order):
        out[:, :, dy::2, dx::2] = w[:, i * c : (i + 1) * c]
    return out


def fold_focus(model: Any) -> tuple[Any, list[FocusFold]]:
    """A copy of `model` with each Focus stem (a Concat of the four 2x2 phases of one
    tensor, read only by one plain k x k conv) replaced by one 2k x 2k conv of stride 2 on
    the tensor, and what was folded."""
    import onnx
    from onnx import numpy_helper

    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    values = constant_values(out)
    writers = producers(g)
    readers: dict[str, list[Any]] = {}
    for n in g.node:
        for i in n.input:
            readers.setdefault(i, []).append(n)
    folds: list[FocusFold] = []
    swap: dict[int, Any] = {}
    drop: set[int] = set()
    for cat in g.node:
        if cat.op_type != "Concat" or len(cat.input) != 4 or _conv_attrs(cat).get("axis") != 1:
            continue
        phases = [_phase(t, writers, values) for t in cat.input]
        if any(p is None for p in phases) or len({p[0] for p in phases if p}) != 1:
            continue
        order = [(p[1], p[2]) for p in phases if p]
        convs = readers.get(cat.output[0], [])
        if sorted(order) != [(0, 0), (0, 1), (1, 0), (1, 1)] or len(convs) != 1:
            continue
        conv = convs[0]
        w = values.get(conv.input[1]) if conv.op_type == "Conv" else None
        if w is None or w.ndim != 4 or w.shape[2] != w.shape[3] or w.shape[1] % 4:
            continue
        k = int(w.shape[2])
        p = _plain(conv, k)
        if p is None or conv.input[0] != cat.output[0]:
            continue
        wname = f"{conv.name or conv.output[0]}.focus_weight"
        g.initializer.append(numpy_helper.from_array(_weight(w, order), wname))
        inputs = [phases[0][0] if phases[0] else "", wname, *conv.input[2:]]
        swap[id(conv)] = onnx.helper.make_node(
            "Conv",
            inputs,
            list(conv.output),
            name=conv.name or None,
            kernel_shape=[2 * k, 2 * k],
            strides=[2, 2],
            pads=[2 * p] * 4,
        )
        drop.add(id(cat))
        folds.append(FocusFold(cat.name, conv.name, 2 * k))
    if not folds:
        return out, []
    nodes = [swap.get(id(n), n) for n in g.node if id(n) not in drop]
    # The slices (and constants) nothing reads any more go too, outputs last to first.
    graph_outputs = {o.name for o in g.output}
    while True:
        used = reads(nodes)
        dead = [
            n
            for n in nodes
            if n.op_type in ("Slice", "Constant")
            and not any(used[o] or o in graph_outputs for o in n.output)
        ]
        if not dead:
            break
        gone = {id(n) for n in dead}
        nodes = [n for n in nodes if id(n) not in gone]
    replace_nodes(g, nodes, used)
    return out, folds


def focus_file(src: Path, folder: Path) -> tuple[Path, list[FocusFold]]:
    """`src` with its Focus stems folded, written into `folder` (or `src` itself when it
    has none), and what was folded."""
    return rewrite_file(src, folder, "focus", fold_focus)
