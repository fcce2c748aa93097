"""A channel shuffle after a concat as one concat on a new axis, for OpenVINO.

ShuffleNet-style blocks (PicoDet-S's ESNet backbone: 10 of them) write
`Concat(a, b) -> Reshape(N, 2, C/2, H, W) -> Transpose(0, 2, 1, 3, 4) -> Reshape(N, C, H,
W)`: the channels of a and b interleaved. OpenVINO runs that as a Concat and a
ShuffleChannels, two copies of the tensor. Stacking a and b on a new axis after the
channels does the interleaving in the one copy the concat makes:

    Unsqueeze(a, 2), Unsqueeze(b, 2) -> Concat(axis 2) -> Reshape(N, C, H, W)

(`[:, i, 0] = a[i], [:, i, 1] = b[i]`, read as channel 2i and 2i + 1). Exact: it moves the
same values to the same places (tests: a built graph bit for bit, PicoDet-S on vtest frames).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from strata.tools.models.onnx_graph import (
    attribute,
    constant_values,
    opset,
    producers,
    reads,
    replace_nodes,
    rewrite_file,
)


@dataclass(frozen=True, slots=True)
class ShuffleFold:
    """One folded shuffle: the concat it read, and the reshape whose output it writes."""

    concat: str
    output: str


def fold_shuffles(model: Any) -> tuple[Any, list[ShuffleFold]]:
    """A copy of `model` with each Concat(axis 1) -> Reshape(groups = its inputs) ->
    Transpose(0, 2, 1, 3, 4) -> Reshape chain, each link read only by the next, as one
    Concat on a new axis 2 of the unsqueezed inputs, then that last Reshape; and what was
    folded."""
    import onnx

    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    values = constant_values(out)
    writers = producers(g)
    uses = reads(g.node, g.output)
    axes_input = opset(out, 13) >= 13  # Unsqueeze's axes became an input in opset 13
    replace: dict[int, list[Any]] = {}
    drop: set[int] = set()
    folds: list[ShuffleFold] = []
    for last in g.node:
        if last.op_type != "Reshape":
            continue
        tr = writers.get(last.input[0])
        if tr is None or tr.op_type != "Transpose" or uses[tr.output[0]] != 1:
            continue
        if list(attribute(tr, "perm", [])) != [0, 2, 1, 3, 4]:
            continue
        first = writers.get(tr.input[0])
        if first is None or first.op_type != "Reshape" or uses[first.output[0]] != 1:
            continue
        cat = writers.get(first.input[0])
        if cat is None or cat.op_type != "Concat" or uses[cat.output[0]] != 1:
            continue
        shape = values.get(first.input[1])
        if attribute(cat, "axis", None) != 1 or shape is None or shape.size != 5:
            continue
        if int(shape.ravel()[1]) != len(cat.input):
            continue  # the groups are not the concat's inputs
        base = cat.name or cat.output[0]
        nodes: list[Any] = []
        stacked: list[str] = []
        if axes_input:
            axes = onnx.numpy_helper.from_array(np.array([2], np.int64), f"{base}.axes")
            g.initializer.append(axes)
        for i, src in enumerate(cat.input):
            name = f"{base}.unsqueeze{i}"
            if axes_input:
                nodes.append(
                    onnx.helper.make_node("Unsqueeze", [src, axes.name], [name], name=name)
                )
            else:
                nodes.append(onnx.helper.make_node("Unsqueeze", [src], [name], name=name, axes=[2]))
            stacked.append(name)
        nodes.append(
            onnx.helper.make_node("Concat", stacked, [f"{base}.stacked"], name=base, axis=2)
        )
        reshape = onnx.helper.make_node(
            "Reshape", [f"{base}.stacked", last.input[1]], list(last.output), name=last.name
        )
        nodes.append(reshape)
        replace[id(last)] = nodes  # where the last reshape was: every input exists by then
        drop.update({id(cat), id(first), id(tr)})
        folds.append(ShuffleFold(cat.name, last.output[0]))
    if not folds:
        return out, []
    kept = [r for n in g.node if id(n) not in drop for r in replace.get(id(n), [n])]
    used = reads(kept)
    kept = [n for n in kept if n.op_type != "Constant" or used[n.output[0]]]
    replace_nodes(g, kept, used)
    return out, folds


def shuffle_file(src: Path, folder: Path) -> tuple[Path, list[ShuffleFold]]:
    """`src` with its channel shuffles folded into their concats, written into `folder`
    (or `src` itself when it has none), and what was folded."""
    return rewrite_file(src, folder, "shuffle", fold_shuffles)
