"""`strata bench identities`' ceiling of cross-camera links: the cloud's linker on the
every-frame reference's own tracks instead of the cameras' (issue 42).

The cameras' tracks at 1 frame in 5 change person where people meet, so one embedding per
track mixes people; this asks what the same model and linker give when every track is one
reference track. Per camera, each reference track in view is embedded on up to
`CROPS_PER_TRACK` of its kept frames (evenly spread) where its box overlaps no other
reference box, averaged as the edge averages (reid.Look.mean), through the uplink's
float16; its life is the kept frames it was in view. A link is true when both tracks are
the same reference track. What stays under the targets here is the embedding model's and
the linker's share; the rest is the tracker's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from strata.shared.vision import FrameBoxes, iou

if TYPE_CHECKING:
    from strata.edge.tracking.appearance import Embedder

    from .identities import View

CROPS_PER_TRACK = 8


def _presence(
    truth: Sequence[FrameBoxes], v: View, every: int
) -> tuple[dict[int, list[int]], dict[int, list[tuple[int, np.ndarray]]]]:
    """Per reference track in view `v`: its kept frames, and its clean (frame, box)."""
    from .identities import in_view

    frames: dict[int, list[int]] = {}
    clean: dict[int, list[tuple[int, np.ndarray]]] = {}
    for i in range(0, len(truth), every):
        tb, tid = in_view(truth[i], v)
        if not len(tid):
            continue
        ov = iou(tb, tb)
        np.fill_diagonal(ov, 0.0)
        for k, t in enumerate(tid.tolist()):
            frames.setdefault(int(t), []).append(i)
            if not (ov[k] > 0).any():
                clean.setdefault(int(t), []).append((i, tb[k]))
    return frames, clean


def ceiling(
    images: Sequence[np.ndarray],
    truth: Sequence[FrameBoxes],
    cams: Sequence[View],
    embedder: Embedder,
    every: int,
) -> dict[str, Any]:
    """The linker's precision and recall on the reference's tracks (module docstring)."""
    from strata.cloud.identity import linker
    from strata.edge.tracking.appearance import from_proto, to_proto

    from .identities import FPS

    looks = []
    keys: list[tuple[str, int]] = []
    for v in cams:
        frames, clean = _presence(truth, v, every)
        for t, seen in clean.items():
            pick = seen[:: max(1, len(seen) // CROPS_PER_TRACK)][:CROPS_PER_TRACK]
            vecs = [
                embedder.embed(np.ascontiguousarray(images[i][:, v.x0 : v.x1]), box[None])[0]
                for i, box in pick
            ]
            vector = from_proto(to_proto(np.sum(vecs, axis=0), len(vecs), "bench"))
            start, end = (int(f / FPS * 1e9) for f in (frames[t][0], frames[t][-1]))
            looks.append(linker.TrackLook((v.name, t), v.name, start, end, vector))
            keys.append((v.name, t))
    by_id: dict[int, list[tuple[str, int]]] = {}
    for key in keys:
        by_id.setdefault(key[1], []).append(key)
    truth_pairs = {frozenset(ks) for ks in by_id.values() if len(ks) == 2}
    default = linker.LinkSettings()
    out: dict[str, Any] = {"tracks": len(looks), "truth_links": len(truth_pairs), "sweep": []}
    for th in (0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9):
        groups = linker.link(looks, linker.LinkSettings(th, default.window_s))
        pred = {
            frozenset((a, b))
            for g in groups
            for a in g
            for b in g
            if a != b and a[0] != b[0]  # type: ignore[index]
        }
        good = len(pred & truth_pairs)
        row = {
            "threshold": th,
            "link_precision": good / len(pred) if pred else None,
            "link_recall": good / len(truth_pairs) if truth_pairs else None,
            "links": len(pred),
        }
        out["sweep"].append(row)
        if th == default.threshold:
            out.update({k: row[k] for k in ("link_precision", "link_recall", "links")})
    return out
