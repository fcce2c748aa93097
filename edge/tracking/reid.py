"""Appearance in the association (BoT-SORT / DeepSORT style): which detections to embed, the
appearance term of the cost, re-linking a lost track, and each track's embedding.

Motion gates (tracker.py: class, centre distance or IoU against the predicted box); inside
the gate the cost is the motion cost plus `weight` x the cosine distance between the track's
embedding and the detection's (`neutral` where either has none), so where two people meet
each keeps the one that looks like it. Embeddings cost a model call per crop, so a
detection is embedded only when an id is at risk or will need one:

1. it is in the gate of two tracks or more, or a track gating it gates another detection
   too, or it overlaps another detection (people who meet), or it is within `gate_distance`
   of a track that met someone in the last `refresh_frames` frames (people who part: where
   motion hands one's id to the other, the crops are what tells them apart);
2. no track gates it (a new track, or a lost track's candidate for re-linking);
3. the one track gating it has no embedding yet, or none for `refresh_frames`.

first the crops of tracks never embedded (a track's events carry its embedding: without one
the cloud can neither link nor find it; `strata bench identities`: 65 of 107 tracks embedded
against 45 of 109 when these came last), then new ones, then parting crops (within the wider
gate of a track that met someone, overlapping no other box: clean crops where motion may
hand ids over), then crops among overlapping boxes, then refreshes; at most
`crops_per_frame` a detected frame on average, saved up to `max_crops`, the bucket full at
the start (the cost bound; the rest counted as skipped). A track's embedding is the
exponential moving average (`ema`) of its crops' (BoT-SORT), re-normalised; crops that
overlap another detection are not averaged in (half of them is someone else).

Re-linking: after motion's association, a track lost at most `relink_frames` source frames
takes an unmatched confident detection within `relink_reach` box heights of its last
observed box whose embedding is at most `relink_distance` from its own (Hungarian on the
cosine distance): the person came back from behind someone.
"""

from __future__ import annotations

import base64
import binascii
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from pydantic import Field
from strata.shared.config.appearance import AppearanceConfig
from strata.shared.config.base import StrictModel
from strata.shared.logs import RateLimitedLog
from strata.shared.vision import iou

log = logging.getLogger(__name__)
_skipped_log = RateLimitedLog(log, 60.0, logging.INFO)

# Embeds the detections at these indices of the frame: (k, dim), L2-normalised.
EmbedFn = Callable[[np.ndarray], np.ndarray]


@dataclass(slots=True)
class Look:
    """One track's embedding: the running average the association uses (`vector`, BoT-SORT's
    EMA), how many crops made it, when last, and the sum of those crops (`total`).

    The EMA follows the person's latest look, which is what matching frame to frame wants,
    but its first crop keeps most of the weight for a long time (0.9 ** samples), and a
    track's first crop is often a person half in view. What the track's events carry, and the
    cloud links across cameras, is `mean`: every averaged crop weighing the same (vtest cut
    into two cameras, `strata bench identities`: precision of links at a threshold of 0.8
    0.0 with the EMA, 0.12 with the mean; 0.0 and 0.59 against tracks seen together)."""

    vector: np.ndarray
    samples: int
    frame: int
    total: np.ndarray | None = None  # sum of the crops averaged in (None: `vector` alone)

    @property
    def mean(self) -> np.ndarray:
        """The L2-normalised mean of the track's crops (its appearance for the uplink)."""
        if self.total is None:
            return self.vector
        return np.asarray(self.total / max(float(np.linalg.norm(self.total)), 1e-12), np.float32)


class LookState(StrictModel):
    """One track's embedding in a checkpoint: its EMA and the direction of its crops' sum as
    float16 little-endian, base64 (as the uplink carries it), the sum's length, crops, and
    the last frame one was averaged in."""

    id: int = Field(ge=1)
    vector: str
    mean: str
    weight: float = Field(ge=0.0)
    samples: int = Field(ge=1)
    frame: int


class LooksState(StrictModel):
    """A camera's appearance state in a checkpoint (TrackerState.looks): the tracks'
    embeddings, when each last met someone, and the crop budget saved up."""

    dim: int = Field(ge=1)
    tracks: list[LookState] = Field(default_factory=list)
    met: dict[int, int] = Field(default_factory=dict)
    tokens: float = Field(0.0, ge=0.0)


def _pack(v: np.ndarray) -> str:
    return base64.b64encode(np.asarray(v, "<f2").tobytes()).decode("ascii")


def _unpack(text: str, dim: int) -> np.ndarray:
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ValueError(f"appearance state: an embedding is not base64 ({exc})") from exc
    if len(raw) != 2 * dim:
        raise ValueError(f"appearance state: an embedding of {len(raw)} bytes, not {2 * dim}")
    v = np.frombuffer(raw, "<f2").astype(np.float32)
    if not np.isfinite(v).all():
        raise ValueError("appearance state: an embedding holds NaN or infinities")
    return v


@dataclass(slots=True)
class FrameLooks:
    """One detected frame's embeddings: per detection (zeros where none) and which have one."""

    vectors: np.ndarray
    has: np.ndarray
    overlapping: np.ndarray


@dataclass
class Looks:
    """The embeddings of one camera's tracks, by track id, and the counts of the work."""

    cfg: AppearanceConfig
    class_ids: frozenset[int] | None = None  # classes embedded (None: every class)
    tracks: dict[int, Look] = field(default_factory=dict)
    # Tracks that ended at the last detected frame (their end events carry the embedding).
    ended: dict[int, Look] = field(default_factory=dict)
    # Per track id: the last detected frame it shared a gate with another or overlapped.
    met: dict[int, int] = field(default_factory=dict)
    embedded: int = 0
    tokens: float = 0.0  # crops this camera may still embed (the cost bound's bucket)
    skipped: int = 0
    relinked: int = 0

    def __post_init__(self) -> None:
        # The bucket starts full: a camera's first frames (its new tracks) get their crops.
        self.tokens = float(self.cfg.max_crops)

    def wanted(
        self, ids: np.ndarray, ok: np.ndarray, near: np.ndarray, boxes: np.ndarray,
        allowed: np.ndarray, frame: int,
    ) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
        """Detections to embed, most at risk first (the module docstring's order), at most
        `max_crops`; and per detection whether it overlaps another. `ok`: motion's gate
        (tracks, detections); `near`: the wider appearance gate; `allowed`: confident
        detections of an embedded class."""
        n = int(boxes.shape[0])
        ov = iou(boxes, boxes) if n else np.zeros((0, 0), np.float32)
        np.fill_diagonal(ov, 0.0)
        overlapping = np.asarray((ov > 0.0).any(axis=1), bool) if n else np.zeros(0, bool)
        gates = ok.sum(axis=0) if ok.size else np.zeros(n, np.int64)
        shared = np.zeros(n, bool)
        if ok.size:
            busy = (ok.sum(axis=1) >= 2) | (ok & overlapping[None, :]).any(axis=1)
            shared = (gates >= 2) | ok[busy].any(axis=0)
            # Tracks that met someone lately: where they part, motion may hand them over.
            for t in np.flatnonzero(busy).tolist():
                self.met[int(ids[t])] = frame
            recent = np.array(
                [frame - self.met.get(int(i), -(10**9)) <= self.cfg.refresh_frames for i in ids]
            )
            shared |= near[recent].any(axis=0)
        # Parting (near a track that met someone, in the clear) first: a clean crop where
        # motion may hand ids over; then crops among overlapping boxes.
        parting = allowed & shared & ~overlapping
        crowded = allowed & overlapping & ~parting
        risk = parting | crowded
        alone = allowed & (gates == 0) & ~risk
        unseen = np.zeros(n, bool)
        stale = np.zeros(n, bool)
        for d in np.flatnonzero(allowed & (gates == 1)).tolist():
            t = int(np.flatnonzero(ok[:, d])[0])
            look = self.tracks.get(int(ids[t]))
            unseen[d] = look is None
            stale[d] = look is not None and frame - look.frame >= self.cfg.refresh_frames
        stale &= ~risk
        parting &= ~unseen
        crowded &= ~unseen
        order = np.concatenate(
            [np.flatnonzero(x) for x in (unseen, alone, parting, crowded, stale)]
        )
        # The cost bound: `crops_per_frame` on average, saved up to `max_crops`.
        self.tokens = min(float(self.cfg.max_crops), self.tokens + self.cfg.crops_per_frame)
        cap = int(self.tokens)
        if order.size > cap:
            self.skipped += int(order.size) - cap
            _skipped_log.warn(
                "skipped",
                "appearance: %d crops needed an embedding over the budget (%d; edge.appearance."
                "crops_per_frame, max_crops) at one frame; not embedded "
                "(strata_edge_appearance_skipped)",
                int(order.size) - cap,
                cap,
            )
        self.tokens -= min(cap, int(order.size))
        return order[:cap], overlapping

    def frame_looks(
        self, embed: EmbedFn | None, idx: np.ndarray, n_det: int, overlapping: np.ndarray
    ) -> FrameLooks:
        """The frame's embeddings of detections `idx` (none without `embed`)."""
        dim = self.cfg.dim
        vectors = np.zeros((n_det, dim), np.float32)
        has = np.zeros(n_det, bool)
        if embed is not None and idx.size:
            got = np.asarray(embed(idx), np.float32)
            if got.shape != (idx.size, dim):
                raise ValueError(
                    f"appearance: {got.shape} embeddings for {idx.size} crops of dim {dim}"
                )
            vectors[idx] = got
            has[idx] = True
            self.embedded += int(idx.size)
        return FrameLooks(vectors, has, overlapping)

    def matrix(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Tracks' embeddings (N, dim) and which tracks have one."""
        out = np.zeros((ids.size, self.cfg.dim), np.float32)
        has = np.zeros(ids.size, bool)
        for i, tid in enumerate(ids.tolist()):
            look = self.tracks.get(int(tid))
            if look is not None:
                out[i], has[i] = look.vector, True
        return out, has

    def distance(self, ids: np.ndarray, fl: FrameLooks) -> np.ndarray:
        """Cosine distance (N tracks, M detections), `neutral` where either has no embedding."""
        t, has = self.matrix(ids)
        d = np.clip(1.0 - t @ fl.vectors.T, 0.0, 2.0)
        both = has[:, None] & fl.has[None, :]
        return np.where(both, d, self.cfg.neutral).astype(np.float32)

    def gate_and_cost(
        self, ids: np.ndarray, fl: FrameLooks
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Pairs that look alike (N, M; within `relink_distance`, both embedded: the gate
        widens to `gate_distance` for them), pairs that look unlike (beyond `veto_distance`,
        both embedded: never matched) and the appearance term of the cost (N, M)."""
        d = self.distance(ids, fl)
        t_has = np.array([int(i) in self.tracks for i in ids.tolist()], bool)
        both = t_has[:, None] & fl.has[None, :]
        alike = both & (d <= self.cfg.relink_distance)
        unlike = both & (d > self.cfg.veto_distance)
        return alike, unlike, self.cfg.weight * d

    def relink(
        self, ids: np.ndarray, lost: np.ndarray, obs: np.ndarray, group: np.ndarray,
        boxes: np.ndarray, fl: FrameLooks,
    ) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
        """Lost tracks (indices `lost`) against unmatched detections `group` by appearance,
        within `relink_reach` box heights of their last observed box `obs`; matched pairs."""
        from scipy.optimize import linear_sum_assignment

        empty = np.zeros(0, np.int64)
        group = group[fl.has[group]]
        if not lost.size or not group.size:
            return empty, empty
        dist = self.distance(
            ids[lost], FrameLooks(fl.vectors[group], fl.has[group], fl.overlapping[group])
        )
        has_look = np.array([int(i) in self.tracks for i in ids[lost].tolist()])
        co = (obs[lost, None, :2] + obs[lost, None, 2:]) / 2
        cd = (boxes[None, group, :2] + boxes[None, group, 2:]) / 2
        reach = self.cfg.relink_reach * np.maximum(obs[lost, 3] - obs[lost, 1], 1.0)
        near = np.linalg.norm(co - cd, axis=2) <= reach[:, None]
        ok = has_look[:, None] & near & (dist <= self.cfg.relink_distance)
        cost = np.where(ok, dist, 1e6)
        r, c = linear_sum_assignment(cost)
        keep = cost[r, c] < 1e6
        self.relinked += int(keep.sum())
        return lost[r[keep]], group[c[keep]]

    def learn(self, ids: np.ndarray, dets: np.ndarray, fl: FrameLooks, frame: int) -> None:
        """Tracks `ids` matched (or started) at detections `dets`: their embeddings move to
        the crops' (a first crop even when it overlaps: better than none)."""
        a = self.cfg.ema
        for tid, d in zip(ids.tolist(), dets.tolist(), strict=True):
            if not fl.has[d]:
                continue
            v = fl.vectors[d]
            look = self.tracks.get(int(tid))
            if look is None:
                self.tracks[int(tid)] = Look(v.copy(), 1, frame, v.copy())
                continue
            if fl.overlapping[d]:
                continue
            mixed = a * look.vector + (1 - a) * v
            look.vector = mixed / max(float(np.linalg.norm(mixed)), 1e-12)
            look.total = v.copy() if look.total is None else look.total + v
            look.samples += 1
            look.frame = frame

    def after(
        self,
        frame: int,
        fl: FrameLooks,
        ended: tuple[int, ...],
        det_ids: np.ndarray,
        dets: np.ndarray,
    ) -> None:
        """A detected frame's association done: tracks `ended` forgotten, then the tracks at
        detections `dets` (matched or started; ids `det_ids` by detection) learn their crops."""
        self.forget(ended)
        self.learn(det_ids[dets], dets, fl, frame)

    def forget(self, ids: tuple[int, ...]) -> None:
        """Tracks that ended (kept in `ended` until the next detected frame)."""
        for tid in ids:
            look = self.tracks.pop(int(tid), None)
            self.met.pop(int(tid), None)
            if look is not None:
                self.ended[int(tid)] = look

    def snapshot(self) -> LooksState:
        """The live tracks' embeddings and the budget (for a checkpoint)."""
        tracks = []
        for tid, look in sorted(self.tracks.items()):
            total = look.vector if look.total is None else look.total
            tracks.append(
                LookState(
                    id=tid,
                    vector=_pack(look.vector),
                    mean=_pack(look.mean),
                    weight=float(np.linalg.norm(total)),
                    samples=look.samples,
                    frame=look.frame,
                )
            )
        return LooksState(
            dim=self.cfg.dim, tracks=tracks, met=dict(self.met), tokens=float(self.tokens)
        )

    def restore(self, state: LooksState, ids: set[int]) -> None:
        """Carry on from `state` for the tracks `ids` (the tracker's restored ones).
        ValueError (nothing changed) when an embedding is malformed or the state's size is
        not edge.appearance.dim (the model changed)."""
        dim = self.cfg.dim
        if state.dim != dim:
            raise ValueError(
                f"appearance state of dim {state.dim}, edge.appearance.dim is {dim} (the "
                "embedding model changed): the tracks' embeddings cannot be restored"
            )
        tracks: dict[int, Look] = {}
        for t in state.tracks:
            if t.id not in ids:
                continue
            vector, mean = _unpack(t.vector, dim), _unpack(t.mean, dim)
            tracks[t.id] = Look(vector, t.samples, t.frame, mean * np.float32(t.weight))
        self.tracks = tracks
        self.ended = {}
        self.met = {k: v for k, v in state.met.items() if k in ids}
        self.tokens = min(float(state.tokens), float(self.cfg.max_crops))

    def of(self, track_id: int) -> Look | None:
        """A live or just ended track's embedding."""
        return self.tracks.get(track_id) or self.ended.get(track_id)
