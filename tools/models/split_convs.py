"""A channel Split of a convolution's output folded into the convolution, for OpenVINO.

PicoDet-S 416's decode splits each head output conv's 112 channels into 80 class scores
(then a Sigmoid) and 32 box distances: `Conv -> Split(80, 32) -> Sigmoid | ...`. OpenVINO's
CPU plugin runs that Split (a VariadicSplit) in its reference kernel, in f32, and cannot fuse
the Sigmoid into the convolution across it; on this machine the 4 splits took 1.8 of 26 ms
of the INT8 model (per-layer counters, docs/models.md). One convolution per piece (the rows
of the weight and bias that made that piece) computes the same numbers with no split, and
each piece's Sigmoid then follows its own convolution. The backbone's three
`Conv -> HardSwish -> Split` become one `Conv -> HardSwish` per half the same way.

Exact: every output channel is the same sum over the same inputs (tests: the rewritten
graph against the original on real frames within 1e-4).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from strata.tools.models.onnx_graph import (
    constant_tensors,
    producers,
    reads,
    replace_nodes,
    rewrite_file,
)

# Ops applied channel by channel that may sit between the conv and the split (duplicated).
ELEMENTWISE = frozenset({"HardSwish", "Relu", "Sigmoid", "LeakyRelu", "Clip"})


@dataclass(frozen=True, slots=True)
class SplitFold:
    """One folded split: the conv it read, the convs that replace it (one per piece)."""

    split: str
    conv: str
    pieces: tuple[str, ...]


def _sizes(node: Any, consts: dict[str, Any]) -> list[int] | None:
    import onnx
    from onnx import numpy_helper

    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    if int(attrs.get("axis", 0)) != 1:
        return None
    if "split" in attrs:
        return [int(s) for s in attrs["split"]]
    if len(node.input) > 1 and node.input[1]:
        arr = consts.get(node.input[1])
        return None if arr is None else [int(s) for s in numpy_helper.to_array(arr).ravel()]
    return None  # equal parts of an unknown size: left alone


@dataclass(frozen=True, slots=True)
class _Match:
    split: Any  # the Split node
    conv: Any  # the Conv it reads
    act: Any | None  # the per-channel op between them, if any
    sizes: list[int]
    weight: np.ndarray
    bias: np.ndarray | None


def _match(
    split: Any, writers: dict[str, Any], uses: Counter[str], consts: dict[str, Any]
) -> _Match | None:
    """The conv (and per-channel op) a Split reads when it can be folded into it, else None."""
    from onnx import numpy_helper

    if split.op_type != "Split" or uses[split.input[0]] != 1:
        return None
    sizes = _sizes(split, consts)
    src = writers.get(split.input[0])
    act = None
    if src is not None and src.op_type in ELEMENTWISE and uses[src.input[0]] == 1:
        act, src = src, writers.get(src.input[0])
    if src is None or src.op_type != "Conv" or sizes is None:
        return None
    if next((a.i for a in src.attribute if a.name == "group"), 1) != 1:
        return None  # a grouped conv's output channels are tied to its input groups
    w = consts.get(src.input[1])
    has_bias = len(src.input) > 2 and bool(src.input[2])
    b = consts.get(src.input[2]) if has_bias else None
    if w is None or uses[src.input[1]] != 1 or (has_bias and b is None):
        return None
    wa = numpy_helper.to_array(w)
    if sum(sizes) != wa.shape[0] or min(sizes) <= 0 or len(split.output) != len(sizes):
        return None
    ba = numpy_helper.to_array(b) if b is not None else None
    return _Match(split, src, act, sizes, wa, ba)


def _pieces(m: _Match) -> tuple[list[Any], list[Any], tuple[str, ...]]:
    """(nodes replacing the conv, their new initializers, the new convs' names)."""
    import onnx
    from onnx import numpy_helper

    base = m.conv.name or m.conv.output[0]
    nodes: list[Any] = []
    inits: list[Any] = []
    names: list[str] = []
    start = 0
    for i, (size, piece_out) in enumerate(zip(m.sizes, m.split.output, strict=True)):
        name = f"{base}.part{i}"
        cut = slice(start, start + size)
        inits.append(numpy_helper.from_array(m.weight[cut].copy(), f"{name}.weight"))
        inputs = [m.conv.input[0], inits[-1].name]
        if m.bias is not None:
            inits.append(numpy_helper.from_array(m.bias[cut].copy(), f"{name}.bias"))
            inputs.append(inits[-1].name)
        conv_out = piece_out if m.act is None else f"{name}.out"
        conv = onnx.helper.make_node("Conv", inputs, [conv_out], name=name)
        conv.attribute.extend(m.conv.attribute)
        nodes.append(conv)
        if m.act is not None:
            act_name = f"{m.act.name}.part{i}" if m.act.name else f"{name}.{m.act.op_type}"
            a = onnx.helper.make_node(m.act.op_type, [conv_out], [piece_out], name=act_name)
            a.attribute.extend(m.act.attribute)
            nodes.append(a)
        names.append(name)
        start += size
    return nodes, inits, tuple(names)


def fold_conv_splits(model: Any) -> tuple[Any, list[SplitFold]]:
    """A copy of `model` where each channel Split fed only by a Conv (directly or through
    one per-channel op of ELEMENTWISE, itself read only by the split) is replaced by one
    Conv per piece, and what was folded. Convs whose weight or bias is not a constant
    (an initializer or a Constant node), or is shared with another node, are left alone."""
    import onnx

    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    consts = constant_tensors(out)
    writers = producers(g)
    uses = reads(g.node, g.output)
    replace: dict[int, list[Any]] = {}  # id(node) -> nodes in its place
    drop: set[int] = set()
    new_inits: list[Any] = []
    folds: list[SplitFold] = []
    for split in g.node:
        m = _match(split, writers, uses, consts)
        if m is None:
            continue
        nodes, inits, names = _pieces(m)
        replace[id(m.conv)] = nodes
        new_inits.extend(inits)
        drop.update(id(n) for n in (m.split, m.act) if n is not None)
        folds.append(SplitFold(split.name, m.conv.name, names))
    if not folds:
        return out, []
    kept = [r for n in g.node if id(n) not in drop for r in replace.get(id(n), [n])]
    used = reads(kept, g.output)
    kept = [n for n in kept if n.op_type != "Constant" or used[n.output[0]]]
    replace_nodes(g, kept, used, new_inits)
    return out, folds


def fold_file(src: Path, folder: Path) -> tuple[Path, list[SplitFold]]:
    """`src` with its conv splits folded, written into `folder` (or `src` itself when there
    is nothing to fold), and what was folded."""
    return rewrite_file(src, folder, "splitfold", fold_conv_splits)


def piece_names(kept: tuple[str, ...], folds: list[SplitFold]) -> tuple[str, ...]:
    """`kept` (node names of the original graph) with each folded conv's pieces added, so a
    conv kept in float stays in float after its split is folded."""
    extra = [p for f in folds if f.conv in kept for p in f.pieces]
    return tuple(dict.fromkeys((*kept, *extra)))
