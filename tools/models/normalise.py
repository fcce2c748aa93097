"""Graph normalisation on import: undo what old exporters leave behind, weights unchanged.

Three rewrites, each plain ONNX graph surgery (the `onnx` package, no optimiser):

- weights listed as graph inputs (exporters before IR 4 had to) are dropped from
  `graph.input`: ONNX Runtime treats an initializer that is also an input as overridable and
  folds no constants through it;
- hard-swish exported as split-up nodes, x * clip(x + 3, 0, 6) / 6 (Paddle: Add, Clip, Mul,
  Div; or with Relu6 as Relu then Min, or Max then Min, and / 6 as * 1/6 on either side of the
  Mul) becomes x * HardSigmoid(x) (alpha 1/6, beta 0.5): one fused kernel instead of four
  element-wise passes;
- an extra input that is a constant in practice (Paddle's `scale_factor` [1, 2], `im_shape`
  [1, 2]) is folded into an initializer: `scale_factor` [[1, 1]], so the boxes come out in
  input pixels and the tiers map them to the frame as for any detector; `im_shape` the
  input's [[H, W]]. A constant of one row ([1, 2]) fixes the image input's batch at 1: the
  graph cannot run more frames against it;
- asked for (`--dynamic-batch`), a batch fixed at 1 (Paddle's exports) is made dynamic
  where the only thing fixing it is the leading 1 of Reshape target shapes: those become 0
  (copy the input's batch), the batch axis of the inputs and outputs `N`; `check_equal` then
  runs two frames as one batch and refuses the rewrite unless each frame's outputs equal
  its own run's.

`check_equal` runs the file before and after on a random and a real input; the import
refuses a normalised file whose outputs differ by more than 1e-4.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

# Extra inputs folded into constants, by name: the value, given the image input's (H, W).
FOLDABLE_INPUTS = ("scale_factor", "im_shape")
TOLERANCE = 1e-4


@dataclass(frozen=True, slots=True)
class Normalised:
    """What normalisation changed; `notes` are the lines `strata models import` prints."""

    model: Any  # onnx.ModelProto
    weight_inputs: int
    hard_swish: int
    folded: tuple[tuple[str, np.ndarray], ...]  # (input name, the constant it became)
    batch_freed: bool = False  # a batch fixed at 1 made dynamic

    @property
    def changed(self) -> bool:
        """Whether the graph differs from the file's."""
        return bool(self.weight_inputs or self.hard_swish or self.folded or self.batch_freed)

    @property
    def notes(self) -> tuple[str, ...]:
        """One line per rewrite that applied."""
        notes = []
        if self.weight_inputs:
            notes.append(
                f"{self.weight_inputs} weights listed as graph inputs dropped from the inputs "
                "(lets ONNX Runtime fold constants)"
            )
        if self.hard_swish:
            notes.append(
                f"{self.hard_swish} hard-swish subgraphs (x * clip(x + 3, 0, 6) / 6) replaced "
                "by x * HardSigmoid(x)"
            )
        for name, _ in self.folded:
            value = (
                "[[1, 1]]: boxes come out in input pixels"
                if name == "scale_factor"
                else "the input's [[H, W]]"
            )
            notes.append(f"input {name!r} folded into a constant {value}")
        if any(a.shape[0] == 1 and a.ndim == 2 for _, a in self.folded):
            notes.append("the image input's batch fixed at 1 (the folded constants hold one row)")
        if self.batch_freed:
            notes.append(
                "batch axis made dynamic (Reshape shapes copy the input's batch; two frames in "
                "one batch checked equal to their own runs)"
            )
        return tuple(notes)


def normalise(model: Any, image: str, hw: tuple[int, int], free_batch: bool = False) -> Normalised:
    """A normalised copy of `model` (`image` is its image input, `hw` its height, width);
    `free_batch` makes a batch fixed at 1 dynamic (`import --dynamic-batch`)."""
    import onnx

    out = onnx.ModelProto()
    out.CopyFrom(model)
    weights = _drop_weight_inputs(out.graph)
    folded = _fold_inputs(out.graph, image, hw)
    swish = _fuse_hard_swish(out.graph, _opset(out))
    freed = free_batch and not folded and _free_batch(out.graph, image)
    if weights and out.ir_version < 4:
        out.ir_version = 4  # initializers outside graph.input need IR 4
    return Normalised(out, weights, swish, folded, freed)


def _free_batch(graph: Any, image: str) -> bool:
    """A batch fixed at 1 made dynamic: every Reshape target shape starting with 1 copies
    the input's batch (0) instead; False (graph untouched) when there is nothing to free."""
    from onnx import numpy_helper

    x = next((v for v in graph.input if v.name == image), None)
    if x is None or x.type.tensor_type.shape.dim[0].dim_value != 1:
        return False
    consts = {t.name: t for t in graph.initializer}
    consts.update({n.output[0]: n.attribute[0].t for n in graph.node if n.op_type == "Constant"})
    for node in graph.node:
        if node.op_type != "Reshape" or node.input[1] not in consts:
            continue
        tensor = consts[node.input[1]]
        shape = numpy_helper.to_array(tensor).copy()
        if shape.ndim == 1 and shape.size and shape[0] == 1:
            shape[0] = 0
            tensor.CopyFrom(numpy_helper.from_array(shape, tensor.name))
    for v in [x, *graph.output]:
        dims = v.type.tensor_type.shape.dim
        if dims and dims[0].dim_value == 1:
            dims[0].Clear()
            dims[0].dim_param = "N"
    del graph.value_info[:]  # stale batch-1 shapes; ONNX Runtime infers them again
    return True


def _opset(model: Any) -> int:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)


def _drop_weight_inputs(graph: Any) -> int:
    weights = {t.name for t in graph.initializer}
    keep = [v for v in graph.input if v.name not in weights]
    dropped = len(graph.input) - len(keep)
    if dropped:
        del graph.input[:]
        graph.input.extend(keep)
    return dropped


def _fold_inputs(graph: Any, image: str, hw: tuple[int, int]) -> tuple[tuple[str, np.ndarray], ...]:
    from onnx import numpy_helper

    folded: list[tuple[str, np.ndarray]] = []
    for v in list(graph.input):
        if v.name == image or v.name not in FOLDABLE_INPUTS:
            continue
        dims = [d.dim_value for d in v.type.tensor_type.shape.dim]
        if dims not in ([1, 2], [2]):
            continue
        value = [1.0, 1.0] if v.name == "scale_factor" else [float(hw[0]), float(hw[1])]
        array = np.asarray(value, np.float32).reshape(dims)
        graph.input.remove(v)
        graph.initializer.append(numpy_helper.from_array(array, v.name))
        folded.append((v.name, array))
    if any(a.shape[0] == 1 and a.ndim == 2 for _, a in folded):
        _fix_batch(graph, image)  # one row of constants: the graph runs one frame at a time
    return tuple(folded)


def _fix_batch(graph: Any, image: str) -> None:
    """Fix the image input's batch at 1 where it was dynamic."""
    for v in graph.input:
        if v.name == image:
            dim = v.type.tensor_type.shape.dim[0]
            if dim.dim_value <= 0:
                dim.Clear()
                dim.dim_value = 1


class _Graph:
    """Producers, consumers and constant values of a graph's tensors."""

    def __init__(self, graph: Any) -> None:
        from onnx import numpy_helper

        self.graph = graph
        self.producer = {o: n for n in graph.node for o in n.output}
        self.consumers: dict[str, list[Any]] = {}
        for n in graph.node:
            for i in n.input:
                self.consumers.setdefault(i, []).append(n)
        self.outputs = {o.name for o in graph.output}
        self.values: dict[str, np.ndarray] = {
            t.name: numpy_helper.to_array(t) for t in graph.initializer
        }
        for n in graph.node:
            if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value":
                self.values[n.output[0]] = numpy_helper.to_array(n.attribute[0].t)

    def scalar(self, name: str) -> float | None:
        """The value of a one-element constant tensor, else None."""
        v = self.values.get(name)
        return float(v.reshape(-1)[0]) if v is not None and v.size == 1 else None

    def only_use(self, name: str) -> Any | None:
        """The one node reading `name` when nothing else does (nor the graph's outputs)."""
        users = self.consumers.get(name, [])
        return users[0] if len(users) == 1 and name not in self.outputs else None


def _near(value: float | None, want: float) -> bool:
    return value is not None and abs(value - want) <= 1e-6 * max(1.0, abs(want))


def _other(node: Any, name: str) -> str | None:
    """The other input of a two-input node, given one."""
    ins: list[str] = list(node.input)
    if len(ins) != 2 or name not in ins:
        return None
    return ins[1] if ins[0] == name else ins[0]


def _attr(node: Any, name: str, default: float) -> float:
    from onnx import helper

    for a in node.attribute:
        if a.name == name:
            return float(helper.get_attribute_value(a))
    return default


def _relu6(g: _Graph, start: Any, opset: int) -> tuple[list[Any], str] | None:
    """The nodes clamping `start`'s output to [0, 6] (Clip, Relu -> Min, Max -> Min)."""
    t = start.output[0]
    if start.op_type == "Clip":
        if opset < 11:
            ok = _near(_attr(start, "min", -np.inf), 0) and _near(_attr(start, "max", np.inf), 6)
        else:
            ins = [*start.input, "", ""]
            ok = _near(g.scalar(ins[1]), 0) and _near(g.scalar(ins[2]), 6)
        return ([start], t) if ok else None
    if start.op_type not in ("Relu", "Max"):
        return None
    if start.op_type == "Max" and not _near(g.scalar(str(_other(start, start.input[0]))), 0):
        return None
    cap = g.only_use(t)
    if cap is None or cap.op_type != "Min" or not _near(g.scalar(str(_other(cap, t))), 6):
        return None
    return [start, cap], cap.output[0]


def _divided_by_6(g: _Graph, node: Any, t: str) -> bool:
    if node.op_type == "Div":
        return node.input[0] == t and _near(g.scalar(node.input[1]), 6)
    return node.op_type == "Mul" and _near(g.scalar(str(_other(node, t))), 1 / 6)


def _match_hard_swish(g: _Graph, add: Any, opset: int) -> tuple[str, list[Any], str] | None:
    """(x, the pattern's nodes, its output name) when `add` starts x * relu6(x + 3) / 6."""
    x = next(
        (i for i in add.input if i not in g.values and _near(g.scalar(str(_other(add, i))), 3)),
        None,
    )
    clamp_start = g.only_use(add.output[0]) if x is not None else None
    clamped = _relu6(g, clamp_start, opset) if clamp_start is not None else None
    if x is None or clamped is None:
        return None
    clamp_nodes, r = clamped
    first = g.only_use(r)
    if first is None:
        return None
    if first.op_type == "Mul" and _other(first, r) == x:  # (x * r) / 6
        last = g.only_use(first.output[0])
        if last is None or not _divided_by_6(g, last, first.output[0]):
            return None
    elif _divided_by_6(g, first, r):  # x * (r / 6)
        last = g.only_use(first.output[0])
        if last is None or last.op_type != "Mul" or _other(last, first.output[0]) != x:
            return None
    else:
        return None
    return x, [add, *clamp_nodes, first, last], last.output[0]


def _fuse_hard_swish(graph: Any, opset: int) -> int:
    from onnx import helper

    if opset < 6:  # HardSigmoid as used here exists from opset 6
        return 0
    g = _Graph(graph)
    replaced: dict[int, list[Any]] = {}  # id of the pattern's last node -> its replacement
    dead: set[int] = set()
    for node in list(graph.node):
        if node.op_type != "Add" or id(node) in dead:
            continue
        found = _match_hard_swish(g, node, opset)
        if found is None:
            continue
        x, nodes, y = found
        hs = f"{y}__hardsigmoid"
        replaced[id(nodes[-1])] = [
            helper.make_node("HardSigmoid", [x], [hs], alpha=1.0 / 6.0, beta=0.5),
            helper.make_node("Mul", [x, hs], [y]),
        ]
        dead.update(id(n) for n in nodes)
    if not replaced:
        return 0
    # The replacement takes the place of the pattern's last node: topological order holds.
    kept: list[Any] = []
    for node in graph.node:
        if id(node) in replaced:
            kept.extend(replaced[id(node)])
        elif id(node) not in dead:
            kept.append(node)
    del graph.node[:]
    graph.node.extend(kept)
    _drop_unused_constants(graph)
    return len(replaced)


def _drop_unused_constants(graph: Any) -> None:
    used = {i for n in graph.node for i in n.input} | {o.name for o in graph.output}
    keep_nodes = [n for n in graph.node if n.op_type != "Constant" or n.output[0] in used]
    if len(keep_nodes) != len(graph.node):
        del graph.node[:]
        graph.node.extend(keep_nodes)
    keep = [t for t in graph.initializer if t.name in used]
    if len(keep) != len(graph.initializer):
        del graph.initializer[:]
        graph.initializer.extend(keep)


def check_equal(
    before: bytes, norm: Normalised, image: str, samples: Sequence[np.ndarray]
) -> float:
    """The largest output difference between the file and its normalised model over
    `samples` (the file fed the folded inputs' constants); ValueError when an output's shape
    differs, or a value by more than TOLERANCE (relative to the output's largest above 1)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.log_severity_level = 3  # the file's own weight-input warnings, one per weight
    sessions = [
        ort.InferenceSession(b, opts, providers=["CPUExecutionProvider"])
        for b in (before, norm.model.SerializeToString())
    ]
    extra = dict(norm.folded)
    worst = 0.0
    for k, x in enumerate(samples):
        ref = sessions[0].run(None, {image: x, **extra})
        got = sessions[1].run(None, {image: x})
        for out, ra, rb in zip(sessions[0].get_outputs(), ref, got, strict=True):
            a, b = np.asarray(ra), np.asarray(rb)
            if a.shape != b.shape:
                raise ValueError(
                    f"output {out.name!r} is {list(a.shape)} before and {list(b.shape)} after "
                    f"normalising (sample {k})"
                )
            if a.size == 0:
                continue
            diff = float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))))
            worst = max(worst, diff)
            if not diff <= TOLERANCE * max(1.0, float(np.max(np.abs(a)))):
                raise ValueError(
                    f"output {out.name!r} differs by {diff:.3g} after normalising (sample {k}, "
                    f"tolerance {TOLERANCE})"
                )
    if norm.batch_freed:
        _check_batch(sessions[1], image, samples)
    return worst


class BatchNotFreeError(ValueError):
    """The graph made batch-dynamic does not run a batch as its frames one by one."""


def _check_batch(session: Any, image: str, samples: Sequence[np.ndarray]) -> None:
    """Two frames in one batch must give each frame's own outputs."""
    singles = [session.run(None, {image: x[:1]}) for x in samples[:2]]
    try:
        batch = session.run(None, {image: np.concatenate([x[:1] for x in samples[:2]])})
    except Exception as exc:  # ONNX Runtime's errors have no common base class
        raise BatchNotFreeError(f"a batch of two does not run: {exc}") from None
    for i, out in enumerate(batch):
        want = np.concatenate([np.asarray(s[i]) for s in singles])
        if out.shape != want.shape or not np.allclose(out, want, atol=TOLERANCE, rtol=1e-4):
            raise BatchNotFreeError(f"output {i} of a batch of two differs from its frames' own")
