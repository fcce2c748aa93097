"""Small reads of an ONNX graph, and the load-rewrite-check-save wrapper, that the rewrites share.

The rewrites for OpenVINO (focus.py, hard_swish.py, shuffle.py, split_convs.py) and the
INT8 scope walks (int8_engines.py, quantize.py) each look nodes up by the tensor they write
and read constants the same way; one copy here keeps them reading the graph alike.
`onnx` is imported inside the functions, as in the modules that use them: it is an optional
dependency of the tools tier.
"""

from __future__ import annotations

from collections.abc import Callable
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
