"""Identities within and across cameras: `strata bench identities --json OUT` (issue 42).

Two cameras cut from one clip (vtest): `left` sees the left 60% of each frame and `right`
the right 60%, so people walk out of one view into the other (the middle 20% both see).

- **truth**: the edge's detector (the starter `picodet_s_416` unless told otherwise) on
  every whole frame, tracked on every frame by the edge's tracker (motion only): the
  every-frame reference's tracks. A camera's truth is the truth boxes whose centre lies in
  its view, in the view's pixels.
- **each camera**: the detector on the camera's own cut frames; its kept frames (one in
  `--every`, 5: the cascade's 20% share on vtest) go through the edge's tracker twice in the
  same run, appearance off and on (edge.appearance: OSNet x0.25 on the crops that need one).
- **id switches** (CLEAR-MOT's IDSW): on each kept frame the camera's tracked boxes are
  matched one-to-one to its truth boxes (IoU at least 0.5, Hungarian, a truth track's last
  match kept while its IoU is still at least 0.5, as CLEAR-MOT does); a truth track whose
  matched track id differs from the one it last matched is a switch. Summed over both
  cameras, per 100 truth tracks seen by the cameras (a truth track seen by both counts in
  each). Also the switches of truth boxes that overlap another truth box (`crowded`), and
  the switches split by cause: `handover` (the truth track's previous track
  is still alive: two tracks traded people) and `fragment` (its previous track was gone:
  a new id after a loss), and tracks per truth track. `at_reference_jumps`: switches
  across a frame where the reference's own id jumped (its box moved over half a height
  from its last appearance, or changed height 1.5x: the reference's tracker gave the id
  to someone else, or to part of someone), so the camera may have been right; vtest's
  reference is a motion tracker on noisy boxes (a quarter of them under 34 px high).
  `at_reference_changes` (bench/identities_reference.py): switches whose two reference
  crops (last match, now) look like two people to the embedding model (farther apart than
  `reference.same_person_distance`, the 95th percentile of one reference id's crops 5
  frames apart); `per_100_tracks_where_reference_kept_its_person` leaves them out.
- **cross-camera links**: each camera track (appearance on) with its embedding as its last
  lifecycle event carries it (reid.Look.mean, through the uplink's float16; a track that
  ended mid-clip keeps the one it had when it ended) and the capture times it was first and
  last seen goes to the cloud's linker, the pure function
  `strata.cloud.identity.linker.link` with its default settings (its fields stay null while
  that module is absent). A link (two tracks of different cameras in one identity) is true
  when both tracks' most matched truth track is the same: `link_precision` and
  `link_recall` against the truth's links. Because the truth's own ids jump where people
  meet, a second truth needs no id to persist: two tracks matched to the same truth box on
  the same frame (the views' overlap) are the same person (`*_seen_together`).
  `link_sweep`: the same at each threshold of `SWEEP` (the default's window);
  `truth_links_embedded`: truth links whose two tracks have an embedding at all.
  `--ceiling` adds `links_on_reference_tracks`: the same linker on the reference's own
  tracks (bench/identities_ceiling.py), what the model and linker give without the
  tracker's id switches.
- **cost**: crops per kept frame; the detector's milliseconds a frame and the embedder's a
  crop, timed interleaved frame by frame (`probe`: on a loaded machine, timings taken apart
  disagree by 3x); appearance's share of the detector's time, crops per kept frame x ms a
  crop / detector ms (`probe_share_of_detector`; target at most 0.15); and frames/s of the
  edge's per-frame path here (detector + tracker, appearance off and on).

The detections of each view are cached in `--work` (detections.npz); a second run only
tracks again.
"""

from __future__ import annotations

import argparse
import importlib
import itertools
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from scipy.optimize import linear_sum_assignment
from strata.edge.tracking.appearance import Embedder
from strata.edge.tracking.tracker import Tracker
from strata.shared.config.appearance import AppearanceConfig
from strata.shared.config.edge import DEFAULT_DETECTOR, TrackingConfig
from strata.shared.vision import FrameBoxes, iou

from .identities_reference import reference_changed, same_person_distance

VIEW_SHARE = 0.6
FPS = 10.0
TARGET_SHARE_OF_DETECTOR = 0.15
# Linker thresholds `link_sweep` scores (cosine similarity).
SWEEP = tuple(round(0.3 + 0.05 * i, 2) for i in range(14))


@dataclass(frozen=True, slots=True)
class View:
    """A camera cut from the clip: columns x0 to x1 of each frame."""

    name: str
    x0: int
    x1: int


def views(width: int) -> list[View]:
    """The left and right 60% of a frame `width` wide."""
    w = round(width * VIEW_SHARE)
    return [View("left", 0, w), View("right", width - w, width)]


def read_clip(clip: Path, limit: int = 0) -> list[np.ndarray]:
    """The clip's frames (BGR), the first `limit` of them when given."""
    import av

    out = []
    with av.open(str(clip)) as container:
        for frame in container.decode(video=0):
            out.append(frame.to_ndarray(format="bgr24"))
            if limit and len(out) >= limit:
                break
    return out


class PersonDetector:
    """The edge's detector (a repository model, manifest-driven), people only."""

    def __init__(self, name: str, repository: str | None, threads: int) -> None:
        from strata.shared.models import ModelRepository
        from strata.shared.models.detector import detector_spec
        from strata.shared.vision import LetterboxWriter, Thresholds

        repo = ModelRepository(repository or None)
        self.spec = detector_spec(repo.manifest(name))
        self.loaded = repo.open(name, threads=threads) if threads else repo.open(name)
        size = self.spec.preprocess.size
        self.writer = LetterboxWriter(size, self.spec.preprocess)
        self.batch = np.zeros((1, 3, size, size), np.float32)
        names = [o.name for o in self.loaded.runner.outputs]
        self.order = [names.index(n) for n in self.spec.outputs] if self.spec.outputs else None
        self.person = list(self.spec.labels).index("person")
        self.th = Thresholds()
        self.seconds = 0.0
        self.frames = 0

    def detect(self, image: np.ndarray) -> FrameBoxes:
        from strata.shared.vision import decode_detections

        t0 = time.perf_counter()
        lb = self.writer.write(image, self.batch[0])
        outs = self.loaded.runner.run(self.batch)
        if self.order is not None:
            outs = [outs[i] for i in self.order]
        b = decode_detections(self.spec.layout, outs, [lb], self.th)[0]
        self.seconds += time.perf_counter() - t0
        self.frames += 1
        keep = b.class_ids == self.person
        return FrameBoxes(b.boxes[keep], b.scores[keep], np.zeros(int(keep.sum()), np.int32))


def detect_all(
    frames: Sequence[np.ndarray], cams: Sequence[View], det: PersonDetector, cache: Path
) -> dict[str, list[FrameBoxes]]:
    """Per view ("full" and each camera): the detector's boxes on every frame (cached)."""
    names = ["full", *(v.name for v in cams)]
    if cache.is_file():
        data = np.load(cache)
        if int(data["frames"]) == len(frames):
            return {n: _unpack(data, n, len(frames)) for n in names}
    out: dict[str, list[FrameBoxes]] = {n: [] for n in names}
    for im in frames:
        out["full"].append(det.detect(im))
        for v in cams:
            out[v.name].append(det.detect(np.ascontiguousarray(im[:, v.x0 : v.x1])))
    arrays: dict[str, np.ndarray] = {"frames": np.array(len(frames))}
    for n, boxes in out.items():
        arrays[f"{n}_boxes"] = np.concatenate([b.boxes for b in boxes]).reshape(-1, 4)
        arrays[f"{n}_scores"] = np.concatenate([b.scores for b in boxes])
        arrays[f"{n}_count"] = np.array([len(b) for b in boxes])
    cache.parent.mkdir(parents=True, exist_ok=True)
    np.savez(cache, **arrays)  # type: ignore[arg-type]
    return out


def _unpack(data: Any, name: str, total: int) -> list[FrameBoxes]:
    counts = data[f"{name}_count"]
    ends = np.cumsum(counts)
    out = []
    for i in range(total):
        a, b = int(ends[i] - counts[i]), int(ends[i])
        out.append(
            FrameBoxes(
                data[f"{name}_boxes"][a:b].astype(np.float32),
                data[f"{name}_scores"][a:b].astype(np.float32),
                np.zeros(b - a, np.int32),
            )
        )
    return out


@dataclass
class TrackLife:
    """A camera track: frames seen, truth ids it matched, its embedding at the end."""

    first: int
    last: int
    truth: dict[int, int] = field(default_factory=dict)
    vector: np.ndarray | None = None


@dataclass
class CameraRun:
    """One camera's tracker run (appearance off or on) scored against its truth."""

    switches: int = 0
    handovers: int = 0
    fragments: int = 0
    crowded: int = 0  # switches of a truth box overlapping another truth box
    # Switches across a jump of the reference's own id (reference_jumps): the reference, not
    # the camera's tracker, changed person there; and per truth id its last matched frame.
    at_jumps: int = 0
    jumps: dict[int, np.ndarray] = field(default_factory=dict)
    matched_at: dict[int, tuple[int, np.ndarray]] = field(default_factory=dict)
    # Per switch: the truth box's frame and box at its last match and now (the reference's
    # two crops, identities_reference.py: did the reference itself change person?).
    switch_boxes: list[tuple[int, np.ndarray, int, np.ndarray]] = field(default_factory=list)
    truth_tracks: set[int] = field(default_factory=set)
    tracks: dict[int, TrackLife] = field(default_factory=dict)
    # For IDF1 and persistent switches: per truth id its matched track ids in frame order,
    # matched (truth, track) pairs, and the boxes of each side.
    seq: dict[int, list[int]] = field(default_factory=dict)
    pairs: dict[tuple[int, int], int] = field(default_factory=dict)
    # (frame, truth id) -> the track matched to that truth box at that frame.
    at: dict[tuple[int, int], int] = field(default_factory=dict)
    truth_boxes: int = 0
    track_boxes: int = 0
    crops: int = 0
    embed_s: float = 0.0
    track_s: float = 0.0
    kept: int = 0


def truth_tracks(full: Sequence[FrameBoxes], tracking: TrackingConfig) -> list[FrameBoxes]:
    """The every-frame reference's tracks: boxes with ids (class_ids carry the ids)."""
    tracker = Tracker(tracking)
    out = []
    for i, dets in enumerate(full):
        t = tracker.update(i, dets)
        keep = t.track_ids != 0
        out.append(FrameBoxes(t.boxes[keep], t.scores[keep], t.track_ids[keep].astype(np.int64)))
    return out


# A reference id "jumps" where its box moves more than this many box heights from its last
# appearance (plus `JUMP_PER_FRAME` a frame of gap), or its height changes by more than
# `JUMP_SIZE`x: at 10 fps a person moves ~0.05 heights a frame, so the reference's tracker
# gave the id to someone else (or to a part of someone: a head, a torso).
JUMP_HEIGHTS = 0.5
JUMP_PER_FRAME = 0.1
JUMP_SIZE = 1.5


def reference_jumps(truth: Sequence[FrameBoxes]) -> dict[int, np.ndarray]:
    """Per reference id, the frames where its box jumped from its last appearance."""
    last: dict[int, tuple[int, np.ndarray]] = {}
    out: dict[int, list[int]] = {}
    for f, t in enumerate(truth):
        for box, who in zip(t.boxes, t.class_ids.tolist(), strict=True):
            seen = last.get(int(who))
            last[int(who)] = (f, box)
            if seen is None:
                continue
            gap = f - seen[0]
            h0, h1 = max(seen[1][3] - seen[1][1], 1.0), max(box[3] - box[1], 1.0)
            c0 = (seen[1][:2] + seen[1][2:]) / 2
            c1 = (box[:2] + box[2:]) / 2
            reach = (JUMP_HEIGHTS + JUMP_PER_FRAME * (gap - 1)) * max(h0, h1)
            if np.linalg.norm(c1 - c0) > reach or max(h0, h1) > JUMP_SIZE * min(h0, h1):
                out.setdefault(int(who), []).append(f)
    return {k: np.asarray(v, np.int64) for k, v in out.items()}


def in_view(truth: FrameBoxes, v: View) -> tuple[np.ndarray, np.ndarray]:
    """The truth boxes whose centre is inside view `v`, in its pixels, and their ids."""
    cx = (truth.boxes[:, 0] + truth.boxes[:, 2]) / 2
    keep = (cx >= v.x0) & (cx < v.x1)
    boxes = truth.boxes[keep].copy()
    boxes[:, [0, 2]] = np.clip(boxes[:, [0, 2]] - v.x0, 0, v.x1 - v.x0)
    return boxes, truth.class_ids[keep]


def run_camera(
    frames: Sequence[np.ndarray],
    dets: Sequence[FrameBoxes],
    truth: Sequence[FrameBoxes],
    v: View,
    setup: Setup,
    embedder: Embedder | None,
) -> CameraRun:
    """Camera `v`'s kept frames through the tracker (appearance when `embedder`), scored."""
    run = CameraRun(jumps=reference_jumps(truth))
    appearance = setup.appearance if embedder is not None else None
    tracker = Tracker(setup.tracking, appearance, frozenset({0}) if appearance else None)
    last: dict[int, int] = {}  # truth id -> the track id it last matched
    for i in range(0, len(dets), setup.every):
        image = frames[i][:, v.x0 : v.x1] if embedder is not None else None
        d = dets[i]
        t0 = time.perf_counter()
        crops0, s0 = (embedder.crops, embedder.seconds) if embedder else (0, 0.0)

        def embed(idx: np.ndarray, image: Any = image, d: FrameBoxes = d) -> np.ndarray:
            assert embedder is not None
            return embedder.embed(image, d.boxes[idx])

        out = tracker.update(i, d, embed if embedder is not None else None)
        run.track_s += time.perf_counter() - t0
        if embedder is not None:
            run.crops += embedder.crops - crops0
            run.embed_s += embedder.seconds - s0
        run.kept += 1
        if tracker.looks is not None:
            # A track's embedding as its end event carries it: the tracker keeps an ended
            # track's only until its next detected frame.
            for gone in out.ended:
                look = tracker.looks.of(gone)
                if look is not None and gone in run.tracks:
                    run.tracks[gone].vector = look.mean.copy()
        alive = {int(x) for x in tracker._ids.tolist()}
        for tid in out.track_ids.tolist():
            if tid:
                life = run.tracks.setdefault(int(tid), TrackLife(i, i))
                life.last = i
        tb, tid = in_view(truth[i], v)
        run.truth_tracks.update(int(x) for x in tid.tolist())
        _score(run, (out.boxes, out.track_ids), (tb, tid), last, alive, i)
    if tracker.looks is not None:  # the tracks alive at the clip's end
        for tid, life in run.tracks.items():
            look = tracker.looks.of(tid)
            if look is not None:
                life.vector = look.mean.copy()
    return run


# CLEAR-MOT (Bernardin and Stiefelhagen 2008, as py-motmetrics does it): a truth box's
# match of the previous frame is kept while still valid (IoU at least 0.5) before the rest
# are matched, so a better overlap with a neighbour's box is not scored as a switch.
_KEEP = 10.0


def _kept(tid: np.ndarray, ids: np.ndarray, last: dict[int, int], ov: np.ndarray) -> np.ndarray:
    """(truth, tracked) pairs that are the truth's last match and still valid (IoU >= 0.5)."""
    before = np.array([last.get(int(t), 0) for t in tid.tolist()], np.uint64)
    same: np.ndarray = (before[:, None] == ids[None, :].astype(np.uint64)) & (before[:, None] != 0)
    return same & (ov >= 0.5)


def _score(
    run: CameraRun,
    tracked: tuple[np.ndarray, np.ndarray],
    truth: tuple[np.ndarray, np.ndarray],
    last: dict[int, int],
    alive: set[int],
    frame: int = 0,
) -> None:
    """Frame `frame`'s matching to the truth and its id switches (module docstring):
    `tracked` and `truth` are (boxes, ids)."""
    (boxes, ids), (tb, tid) = tracked, truth
    keep = ids != 0
    boxes, ids = boxes[keep], ids[keep]
    run.truth_boxes += len(tid)
    run.track_boxes += len(ids)
    if not len(ids) or not len(tid):
        return
    ov = iou(tb, boxes)
    among = iou(tb, tb)
    np.fill_diagonal(among, 0.0)
    r, c = linear_sum_assignment(-(ov + _KEEP * _kept(tid, ids, last, ov)))
    for a, b in zip(r.tolist(), c.tolist(), strict=True):
        if ov[a, b] < 0.5:
            continue
        who, track = int(tid[a]), int(ids[b])
        life = run.tracks[track]
        life.truth[who] = life.truth.get(who, 0) + 1
        run.seq.setdefault(who, []).append(track)
        run.pairs[(who, track)] = run.pairs.get((who, track), 0) + 1
        run.at[(frame, who)] = track
        before = last.get(who)
        if before is not None and before != track:
            run.switches += 1
            run.crowded += int((among[a] > 0).any())
            jumped = run.jumps.get(who)
            since, box = run.matched_at.get(who, (frame, tb[a]))
            run.switch_boxes.append((since, box, frame, tb[a]))
            if jumped is not None and ((jumped > since) & (jumped <= frame)).any():
                run.at_jumps += 1
            if before in alive:
                run.handovers += 1
            else:
                run.fragments += 1
        last[who] = track
        run.matched_at[who] = (frame, tb[a])


@dataclass(frozen=True, slots=True)
class Setup:
    """What one measurement runs with."""

    tracking: TrackingConfig
    appearance: AppearanceConfig
    every: int = 5


def links_of(runs: dict[str, CameraRun]) -> dict[str, Any]:
    """The cloud's linker (its default settings) on the cameras' tracks (appearance on),
    scored against the truth, and the same at each threshold of `SWEEP` (`link_sweep`)."""
    try:
        linker = importlib.import_module("strata.cloud.identity.linker")
    except ImportError:
        return {"link_precision": None, "link_recall": None, "links": None, "truth_links": None,
                "note": "strata.cloud.identity.linker is not here yet (h/ids)"}  # fmt: skip
    from strata.edge.tracking.appearance import from_proto, to_proto

    looks = []
    owner: dict[tuple[str, int], int] = {}
    for cam, run in runs.items():
        for tid, life in run.tracks.items():
            if life.truth:
                owner[(cam, tid)] = max(life.truth, key=lambda k: life.truth[k])
            if life.vector is None:
                continue
            start, end = int(life.first / FPS * 1e9), int(life.last / FPS * 1e9)
            # As the cloud gets it: float16 on the uplink.
            vector = from_proto(to_proto(life.vector, 1, "bench"))
            looks.append(linker.TrackLook((cam, tid), cam, start, end, vector))
    by_truth: dict[int, list[tuple[str, int]]] = {}
    for key, t in owner.items():
        by_truth.setdefault(t, []).append(key)
    truth = {frozenset((a, b)) for ks in by_truth.values() for a in ks for b in ks if a[0] != b[0]}
    together = seen_together(runs)
    embedded = {lk.key for lk in looks}
    reachable = {p for p in truth if p <= embedded}

    def score(settings: Any) -> dict[str, Any]:
        groups = linker.link(looks, settings)
        predicted = {
            frozenset((a, b)) for g in groups for a in g for b in g if a[0] != b[0] and a < b
        }
        good = len(predicted & truth)
        seen = len(predicted & together)
        return {
            "link_precision": good / len(predicted) if predicted else None,
            "link_recall": good / len(truth) if truth else None,
            "links": len(predicted),
            "true_links": good,
            "link_precision_seen_together": seen / len(predicted) if predicted else None,
            "link_recall_seen_together": seen / len(together) if together else None,
        }

    default = linker.LinkSettings()
    sweep = [{"threshold": th, **score(linker.LinkSettings(th, default.window_s))} for th in SWEEP]
    return {
        **score(default),
        "link_threshold": default.threshold,
        "link_window_s": default.window_s,
        "truth_links": len(truth),
        "truth_links_seen_together": len(together),
        # Truth links whose two tracks both have an embedding (the rest cannot be made).
        "truth_links_embedded": len(reachable),
        "tracks_with_embedding": len(looks),
        "tracks": sum(len(r.tracks) for r in runs.values()),
        "link_sweep": sweep,
    }


def seen_together(runs: dict[str, CameraRun]) -> set[frozenset[tuple[str, int]]]:
    """Pairs of tracks of different cameras matched to the same truth box on the same frame
    (in the views' overlap): the same person at that instant, whatever the truth's ids did
    before or after."""
    out: set[frozenset[tuple[str, int]]] = set()
    names = sorted(runs)
    for i, ca in enumerate(names):
        for cb in names[i + 1 :]:
            other = runs[cb].at
            for key, a in runs[ca].at.items():
                b = other.get(key)
                if b is not None:
                    out.add(frozenset(((ca, a), (cb, b))))
    return out


def persistent(seq: Sequence[int]) -> int:
    """Switches of one truth track that last: changes of its matched track id once runs
    of a single frame are left out (A A B A A is a flicker of the match, not a switch)."""
    runs: list[list[int]] = []
    for t in seq:
        if runs and runs[-1][0] == t:
            runs[-1][1] += 1
        else:
            runs.append([t, 1])
    kept = [t for t, n in runs if n > 1]
    return sum(1 for a, b in itertools.pairwise(kept) if a != b)


def idf1(run: CameraRun) -> tuple[int, int, int]:
    """IDF1's parts (Ristani et al. 2016): IDTP of the best one-to-one truth-track mapping,
    the truth's boxes and the tracks' boxes."""
    if not run.pairs:
        return 0, run.truth_boxes, run.track_boxes
    truths = sorted({a for a, _ in run.pairs})
    tracks = sorted({b for _, b in run.pairs})
    m = np.zeros((len(truths), len(tracks)))
    for (a, b), n in run.pairs.items():
        m[truths.index(a), tracks.index(b)] = n
    r, c = linear_sum_assignment(-m)
    return int(m[r, c].sum()), run.truth_boxes, run.track_boxes


def per_100(runs: Sequence[CameraRun]) -> tuple[float, dict[str, Any]]:
    """Id switches per 100 truth tracks over the cameras, and the counts."""
    sw = sum(r.switches for r in runs)
    truth = sum(len(r.truth_tracks) for r in runs)
    tp, nt, nh = (sum(x) for x in zip(*(idf1(r) for r in runs), strict=True))
    lasting = sum(persistent(q) for r in runs for q in r.seq.values())
    counts = {
        "idf1": 2 * tp / (nt + nh) if nt + nh else None,
        "persistent_switches": lasting,
        "persistent_switches_per_100_tracks": 100.0 * lasting / truth if truth else None,
        "switches": sw,
        "handovers": sum(r.handovers for r in runs),
        "crowded": sum(r.crowded for r in runs),
        "at_reference_jumps": sum(r.at_jumps for r in runs),
        "fragments": sum(r.fragments for r in runs),
        "truth_tracks": truth,
        "tracks": sum(len(r.tracks) for r in runs),
    }
    return (100.0 * sw / truth if truth else 0.0), counts


def measure(frames: list[np.ndarray], boxes: dict[str, list[FrameBoxes]], setup: Setup,
            det_ms: float, embedder: Embedder) -> dict[str, Any]:  # fmt: skip
    """The whole report from the clip's frames and each view's detections."""
    cams = views(frames[0].shape[1])
    truth = truth_tracks(boxes["full"], setup.tracking)
    off = {v.name: run_camera(frames, boxes[v.name], truth, v, setup, None) for v in cams}
    on = {v.name: run_camera(frames, boxes[v.name], truth, v, setup, embedder) for v in cams}
    without, c_off = per_100(list(off.values()))
    with_, c_on = per_100(list(on.values()))
    same = same_person_distance(frames, truth, embedder)
    for c, runs in ((c_off, off), (c_on, on)):
        changed = reference_changed(frames, runs, cams, embedder, same)
        c["at_reference_changes"] = changed
        kept = c["switches"] - changed
        c["switches_where_reference_kept_its_person"] = kept
        c["per_100_tracks_where_reference_kept_its_person"] = 100.0 * kept / c["truth_tracks"]
    reference = {"same_person_distance": same}
    kept = sum(r.kept for r in on.values())
    crops = sum(r.crops for r in on.values())
    embed_s = sum(r.embed_s for r in on.values())
    track_off = sum(r.track_s for r in off.values()) / max(kept, 1) * 1e3
    track_on = sum(r.track_s for r in on.values()) / max(kept, 1) * 1e3
    per_frame_embed = embed_s / max(kept, 1) * 1e3
    return {
        "id_switches_per_100_tracks_without": without,
        "id_switches_per_100_tracks": with_,
        "id_switch_ratio": with_ / without if without else None,
        "counts_without": c_off,
        "counts_with": c_on,
        "reference": reference,
        **links_of(on),
        "search_p99_ms_at_100000": None,
        "cost": {
            "ms_per_crop": embed_s / crops * 1e3 if crops else None,
            "crops_per_kept_frame": crops / max(kept, 1),
            "detector_ms_per_frame": det_ms,
            "appearance_ms_per_kept_frame": per_frame_embed,
            "share_of_detector": per_frame_embed / det_ms if det_ms else None,
            "target_share_of_detector": TARGET_SHARE_OF_DETECTOR,
            "tracker_ms_per_kept_frame_without": track_off,
            "tracker_ms_per_kept_frame_with": track_on,
            "edge_frames_per_s_without": 1e3 / (det_ms + track_off),
            "edge_frames_per_s_with": 1e3 / (det_ms + track_on),
        },
        "kept_frames": kept,
        "every": setup.every,
        "frames": len(frames),
    }


def probe(
    frames: Sequence[np.ndarray],
    dets: Sequence[FrameBoxes],
    v: View,
    det: PersonDetector,
    embedder: Embedder,
    samples: int = 40,
) -> tuple[float, float]:
    """The detector's milliseconds a frame and the embedder's a crop (batches of up to 8 of
    the frame's people), interleaved frame by frame on the same camera's frames so the
    machine's load weighs on both alike: medians."""
    d_ms: list[float] = []
    c_ms: list[float] = []
    for i in range(0, len(frames), max(1, len(frames) // samples)):
        im = np.ascontiguousarray(frames[i][:, v.x0 : v.x1])
        t0 = time.perf_counter()
        det.detect(im)
        d_ms.append((time.perf_counter() - t0) * 1e3)
        boxes = dets[i].boxes[:8]
        if len(boxes):
            t0 = time.perf_counter()
            embedder.embed(im, boxes)
            c_ms.append((time.perf_counter() - t0) * 1e3 / len(boxes))
    return float(np.median(d_ms)), float(np.median(c_ms)) if c_ms else 0.0


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", required=True, metavar="OUT", help="write the figures here")
    p.add_argument("--clip", default=None, help="the clip (default: data/vtest.mp4)")
    p.add_argument("--work", default="bench-out/identities", help="cache of detections")
    p.add_argument("--every", type=int, default=5, help="keep one frame in N (5: 20%%)")
    p.add_argument("--frames", type=int, default=0, help="only the first N frames")
    p.add_argument("--model", default=DEFAULT_DETECTOR, help="the detector")
    p.add_argument("--model-repository", default=None)
    p.add_argument("--threads", type=int, default=1, help="ONNX Runtime threads")
    p.add_argument(
        "--ceiling",
        action="store_true",
        help="also link the reference's own tracks (links_on_reference_tracks: what the "
        "model and linker give without the tracker's id switches)",
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an edge.appearance setting (repeatable), e.g. weight=4",
    )


def run(args: argparse.Namespace) -> int:
    from strata.tools.clips import find_vtest

    clip = find_vtest(args.clip)
    if clip is None or not clip.is_file():
        print("identities: no clip; pass --clip or put vtest.mp4 in data/")
        return 2
    settings: dict[str, Any] = {"threads": args.threads}
    for kv in args.set:
        k, _, v = kv.partition("=")
        settings[k] = json.loads(v)
    appearance = AppearanceConfig(**settings)
    frames = read_clip(clip, args.frames)
    det = PersonDetector(args.model, args.model_repository, args.threads)
    cams = views(frames[0].shape[1])
    boxes = detect_all(frames, cams, det, Path(args.work) / f"detections-{len(frames)}.npz")
    embedder = Embedder(appearance)
    det_ms, crop_ms = probe(frames, boxes[cams[0].name], cams[0], det, embedder)
    setup = Setup(TrackingConfig(), appearance, args.every)
    report = measure(frames, boxes, setup, det_ms, embedder)
    if args.ceiling:
        from .identities_ceiling import ceiling

        truth = truth_tracks(boxes["full"], setup.tracking)
        report["links_on_reference_tracks"] = ceiling(frames, truth, cams, embedder, args.every)
    cost = report["cost"]
    cost["probe_ms_per_crop"] = crop_ms
    cost["probe_share_of_detector"] = cost["crops_per_kept_frame"] * crop_ms / det_ms
    report["appearance"] = appearance.model_dump()
    report["clip"] = str(clip)
    report["command_line"] = getattr(args, "command_line", "")
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(report, indent=2, default=str))
    print(json.dumps({k: v for k, v in report.items() if k != "appearance"}, indent=2, default=str))
    return 0
