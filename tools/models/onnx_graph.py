"""The ONNX graph reads and edits, and the load-rewrite-check-save wrapper, that the
graph rewrites share.

The rewrites for OpenVINO (focus.py, hard_swish.py, shuffle.py, split_convs.py) and the
INT8 scope walks (int8_engines.py, quantize.py) each look nodes up by the tensor they write,
read constants, count reads and swap in new nodes the same way; one copy here keeps them
reading and editing the graph alike.
`onnx` is imported inside the functions, as in the modules that use them: it is an optional
dependency of the tools tier.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

Found = TypeVar("Found")


def producers(graph: Any) -> dict[str, Any]:
    """Tensor name -> the node of `graph` that writes it (a NodeProto)."""
    return {o: n for n in graph.node for o in n.output}


def constant_tensors(model: Any) -> dict[str, Any]:
    """Tensor name -> TensorProto for `model`'s initializers and its Constant nodes' values
    (a Constant's value overrides an initializer of the same name)."""
    out = {t.name: t for t in model.graph.initializer}
    for n in model.graph.node:
        if n.op_type == "Constant":
            # Only `value`: the other forms (value_float, sparse_value ...) are left unread.
            for a in n.attribute:
                if a.name == "value":
                    out[n.output[0]] = a.t
    return out


def constant_values(model: Any) -> dict[str, np.ndarray]:
    """`constant_tensors(model)` as numpy arrays."""
    from onnx import numpy_helper

    return {name: numpy_helper.to_array(t) for name, t in constant_tensors(model).items()}


def reads(nodes: Iterable[Any], outputs: Iterable[Any] = ()) -> Counter[str]:
    """How many times each tensor is read by the inputs of `nodes`, once more for each of
    `outputs` (a graph's output ValueInfos) when they are passed: a rewrite may only fold
    away a tensor nothing else reads."""
    count = Counter(i for n in nodes for i in n.input)
    count.update(o.name for o in outputs)
    return count


def replace_nodes(
    graph: Any, nodes: Sequence[Any], used: Counter[str], added: Sequence[Any] = ()
) -> None:
    """Make `nodes` the nodes of `graph` (in place), keep the initializers `used` counts as
    read, then append the `added` initializers: the weights a rewrite orphaned go with it."""
    del graph.node[:]
    graph.node.extend(nodes)
    remaining = [t for t in graph.initializer if used[t.name]]
    del graph.initializer[:]
    graph.initializer.extend([*remaining, *added])


def attribute(node: Any, name: str, default: Any) -> Any:
    """The value of `node`'s attribute `name`, or `default` when it has none."""
    import onnx

    for a in node.attribute:
        if a.name == name:
            return onnx.helper.get_attribute_value(a)
    return default


def opset(model: Any, default: int) -> int:
    """The default ONNX domain's opset `model` imports, or `default` when it names none."""
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default)


def rewrite_file(
    src: Path, folder: Path, tag: str, rewrite: Callable[[Any], tuple[Any, Found]]
) -> tuple[Path, Found]:
    """`src` rewritten by `rewrite` (model -> (new model, what it found)), checked and
    written into `folder` as `<stem>.<tag>.onnx`, and what it found. When it found nothing
    (an empty list, zero) the file is not written and `src` itself comes back, so the
    caller goes on with the original, unchanged bytes."""
    import onnx

    model = onnx.load(str(src))
    rewritten, found = rewrite(model)
    if not found:
        return src, found
    onnx.checker.check_model(rewritten)
    dst = folder / f"{src.stem}.{tag}.onnx"
    onnx.save(rewritten, str(dst))
    return dst, found
