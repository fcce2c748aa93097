"""How far `strata bench identities`' reference can be trusted: its ids come from a motion
tracker on every frame, which itself hands ids from one person to another where people
meet. A camera's switch is scored against the reference's id; where the reference's own
crops at the truth track's last match and at the switch look like two people, the reference
changed person there, not (or not only) the camera's tracker.

`same_person_distance`: the embedding model's cosine distance between the reference's crops
of one id `gap` frames apart (no jump between), its `quantile` (0.95): what the same person
looks like to the model. `reference_changed`: the switches whose two reference crops are
farther apart than that.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
from strata.edge.tracking.appearance import Embedder
from strata.shared.vision import FrameBoxes

if TYPE_CHECKING:
    from .identities import CameraRun, View


def same_person_distance(
    frames: Sequence[np.ndarray],
    truth: Sequence[FrameBoxes],
    embedder: Embedder,
    gap: int = 5,
    samples: int = 40,
    quantile: float = 0.95,
) -> float:
    """The `quantile` of the distance between a reference id's crops `gap` frames apart,
    over up to `samples` frames spread over the clip (every id on both frames)."""
    out: list[np.ndarray] = []
    step = max(1, (len(truth) - gap) // samples)
    for f in range(0, len(truth) - gap, step):
        a, b = truth[f], truth[f + gap]
        both = np.intersect1d(a.class_ids, b.class_ids)
        if not both.size:
            continue
        ia = np.searchsorted(a.class_ids, both, sorter=np.argsort(a.class_ids))
        ib = np.searchsorted(b.class_ids, both, sorter=np.argsort(b.class_ids))
        ea = embedder.embed(frames[f], a.boxes[np.argsort(a.class_ids)[ia]])
        eb = embedder.embed(frames[f + gap], b.boxes[np.argsort(b.class_ids)[ib]])
        out.append(1.0 - (ea * eb).sum(axis=1))
    d = np.concatenate(out) if out else np.zeros(1)
    return float(np.quantile(d, quantile))


def reference_changed(
    frames: Sequence[np.ndarray],
    runs: dict[str, CameraRun],
    cams: Sequence[View],
    embedder: Embedder,
    same: float,
) -> int:
    """Switches whose reference crops (last match, now) are farther apart than `same`."""
    changed = 0
    for v in cams:
        for f0, b0, f1, b1 in runs[v.name].switch_boxes:
            e0 = embedder.embed(np.ascontiguousarray(frames[f0][:, v.x0 : v.x1]), b0[None])
            e1 = embedder.embed(np.ascontiguousarray(frames[f1][:, v.x0 : v.x1]), b1[None])
            changed += int(1.0 - float((e0 * e1).sum()) > same)
    return changed
