"""The rules engine's outputs on seeded random scenes, against digests of what the engine
gave before its cost work (main at 5f28c0e): every event's bytes, the checkpoint, the
counts, `needs_frames` and `is_stationary` after every frame, and a takeover of the
checkpoint mid-scene. A change that means to change no output must leave them all equal.

A change that means to change outputs (the rules' semantics) regenerates the table with
`python tests/edge/test_rules_golden.py` and says why in its commit. Coordinates are
continuous (no point exactly on a line or an edge), so the digests do not rest on the
last bit of a matrix product.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from typing import Any

import numpy as np
import pytest
from strata.edge.rules.engine import RulesEngine
from strata.edge.rules.events import type_name
from strata.edge.rules.frame import TrackFrame
from strata.shared.config import validate_model
from strata.shared.config.rules import RulesConfig

LABELS = ("person", "car", "dog")
NS = 1_000_000_000


def _line(rng: np.random.Generator, i: int) -> dict[str, Any]:
    a, b = rng.random(2), rng.random(2)
    if rng.random() < 0.5:
        b[1] = a[1] + 1e-3 * rng.random()
    return {
        "name": f"l{i}",
        "points": [a.tolist(), b.tolist()],
        "in_side": "left" if rng.random() < 0.5 else "right",
        "labels": [] if rng.random() < 0.6 else ["person"],
        "min_score": 0.0 if rng.random() < 0.6 else 0.5,
        "debounce_s": float(rng.choice([0.0, 0.3, 1.0])),
    }


def _zone(rng: np.random.Generator, i: int) -> dict[str, Any]:
    x, y = rng.random(2) * 0.6
    w, h = 0.1 + rng.random(2) * 0.3
    if rng.random() < 0.5:
        pts = [[x, y], [x + w, y], [x + w, y + h], [x, y + h]]
    else:
        pts = [[x, y], [x + w, y + h / 3], [x + w / 2, y + h]]
    return {
        "name": f"z{i}",
        "points": pts,
        "labels": [] if rng.random() < 0.6 else ["person", "dog"],
        "min_score": 0.0 if rng.random() < 0.7 else 0.4,
        "min_area": 0.0 if rng.random() < 0.7 else 0.002,
        "enter_frames": int(rng.integers(1, 4)),
        "leave_frames": int(rng.integers(1, 4)),
        "occupancy": bool(rng.random() < 0.7),
    }


def scene_rules(rng: np.random.Generator) -> RulesConfig:
    """0-4 lines, 0-4 zones, 0-2 dwell rules, stationary on or off, random filters."""
    lines = [_line(rng, i) for i in range(int(rng.integers(0, 5)))]
    zones = [_zone(rng, i) for i in range(int(rng.integers(0, 5)))]
    n_dwell = int(rng.integers(0, 3)) if zones else 0
    dwell = [
        {
            "name": f"d{i}",
            "zone": zones[int(rng.integers(0, len(zones)))]["name"],
            "seconds": float(rng.choice([0.5, 2.0, 5.0])),
            "labels": [] if rng.random() < 0.6 else ["car"],
        }
        for i in range(n_dwell)
    ]
    stationary = {
        "enabled": bool(rng.random() < 0.8),
        "max_movement": float(rng.choice([0.02, 0.1])),
        "relative_to": str(rng.choice(["box", "frame"])),
        "seconds": float(rng.choice([0.5, 3.0])),
    }
    cam = {
        "lines": lines,
        "zones": zones,
        "dwell": dwell,
        "reference_point": str(rng.choice(["bottom_center", "center", "top_center"])),
        "stationary": stationary,
    }
    top = {"path_points": int(rng.choice([4, 32])), "end_after_s": float(rng.choice([1.0, 10.0]))}
    return validate_model(RulesConfig, {"cameras": {"cam": cam}, **top})


def _step(rng: np.random.Generator, s: list[float], size: tuple[int, int]) -> None:
    """One frame of a track's walk: sometimes it stops, turns or changes class."""
    if rng.random() < 0.2:
        s[2], s[3] = (0.0, 0.0) if rng.random() < 0.5 else tuple(rng.normal(0, 4, 2))
    s[0] = float(np.clip(s[0] + s[2], 0, size[0]))
    s[1] = float(np.clip(s[1] + s[3], 0, size[1]))
    if rng.random() < 0.05:
        s[4] = int(rng.integers(0, 4))


def scene_frames(rng: np.random.Generator, n_frames: int) -> list[TrackFrame]:
    """Tracks that come, walk, stop and go (ended by the tracker or not), observed or
    predicted, confirmed after 3 detections; uneven frame gaps, repeats, one out of order."""
    size = (640, 480)
    tracks: dict[int, list[float]] = {}
    hits: Counter[int] = Counter()
    next_id, t, out = 1, 10 * NS, []
    most = int(rng.choice([1, 2, 5, 20]))
    for _ in range(n_frames):
        gap = rng.choice([100, 100, 33, 0, 3000], p=[0.6, 0.2, 0.1, 0.05, 0.05])
        t += int(gap) * 1_000_000
        ended: tuple[int, ...] = ()
        if rng.random() < 0.05 and tracks:
            gone = int(rng.choice(list(tracks)))
            del tracks[gone]
            ended = (gone,) if rng.random() < 0.7 else ()
        while len(tracks) < most and rng.random() < 0.3:
            pos, vel = rng.random(2) * size, rng.normal(0, 3, 2)
            tracks[next_id] = [*pos.tolist(), *vel.tolist(), int(rng.integers(0, 3))]
            next_id += 1
        ids = [i for i in tracks if rng.random() < 0.95]
        rng.shuffle(ids)
        boxes, obs = [], rng.random(len(ids)) < 0.7
        for i, seen in zip(ids, obs.tolist(), strict=True):
            s = tracks[i]
            _step(rng, s, size)
            bw, bh = 4 + rng.random() * 20, 8 + rng.random() * 30
            boxes.append([s[0] - bw / 2, s[1] - bh, s[0] + bw / 2, s[1]])
            hits[i] += seen
        late = rng.random() < 0.01
        out.append(
            TrackFrame(
                "cam",
                t - 50_000_000 if late else t,
                size,
                np.array(ids, np.uint64),
                np.array(boxes, np.float64).reshape(-1, 4),
                rng.choice([0.3, 0.45, 0.8, 0.95], len(ids)),
                np.array([tracks[i][4] for i in ids], np.int64),
                np.array([hits[i] >= 3 for i in ids], bool),
                obs,
                LABELS[: 2 + int(rng.random() < 0.5)],
                ended,
            )
        )
    return out


def digest(seed: int, engine: type[Any] = RulesEngine) -> dict[str, Any]:
    """Every output of `engine` over scene `seed`, hashed; event counts by type beside."""
    rng = np.random.default_rng(seed)
    cfg = scene_rules(rng)
    frames = scene_frames(rng, int(rng.integers(50, 250)))
    t0 = frames[0].capture_ns
    eng = engine(cfg, "edge", wall_ns=lambda: t0)
    h, types, seen = hashlib.sha256(), Counter[str](), set[int]()
    for j, f in enumerate(frames):
        for e in eng.process(f):
            # Without the protocol's version stamp: a new minor is not a new engine output.
            plain = type(e)()
            plain.CopyFrom(e)
            plain.ClearField("version")
            h.update(plain.SerializeToString(deterministic=True))
            types[type_name(e.type)] += 1
        seen.update(f.track_ids.tolist())
        need = [eng.needs_frames("cam", s) for s in (0.0, 0.1, 0.5)]
        still = [eng.is_stationary("cam", i) for i in sorted(seen)]
        h.update(repr(([(n.line, n.zone, n.dwell) for n in need], still)).encode())
        if j % 10 == 9 or j == len(frames) - 1:
            snap = json.dumps(eng.snapshot(), sort_keys=True)
            h.update(snap.encode())
            h.update(repr(sorted(map(repr, eng.counts()))).encode())
        if j == len(frames) // 2:  # a takeover: a fresh engine goes on from the checkpoint
            snap = json.dumps(eng.snapshot())
            eng = engine(cfg, "edge", wall_ns=lambda: 0)
            eng.restore(json.loads(snap))
    return {"sha256": h.hexdigest(), "events": dict(sorted(types.items()))}


# Generated from main at 5f28c0e (before the cost work) with this file's scenes.
GOLDEN: dict[int, dict[str, Any]] = {
    0: {
        "sha256": "cd1edb8f9a8adfe068fe52b3a8ee7d35e619bf41b33729109fca5dff23d6adef",
        "events": {
            "active": 81,
            "dwell_exceeded": 10,
            "end": 10,
            "line_crossed": 26,
            "new": 31,
            "stationary": 78,
            "update": 23,
            "zone_entered": 25,
            "zone_left": 21,
        },
    },
    1: {
        "sha256": "0d94a9abe4b31b19aa8394eeaacc6f428e6b3ba4fe73c4c22eee4089a908d35f",
        "events": {"end": 5, "new": 6, "stationary": 3, "update": 1},
    },
    2: {
        "sha256": "ce613475fbb18e238aa564ab83ce2a26bdd1c29f02fda276ba693c73f44439ad",
        "events": {
            "end": 2,
            "line_crossed": 1,
            "new": 21,
            "update": 16,
            "zone_entered": 2,
            "zone_left": 2,
        },
    },
    3: {
        "sha256": "4bd2111806ddd9e7c0514cf89889c62c356914d8d56517d01f1f5ca19f0a42d0",
        "events": {
            "active": 12,
            "end": 8,
            "line_crossed": 1,
            "new": 12,
            "stationary": 15,
            "update": 6,
        },
    },
    4: {
        "sha256": "363741e2d52576240a80946374d8348542ad1959c27f23a7ebee981601ac3b98",
        "events": {
            "active": 25,
            "end": 7,
            "new": 12,
            "stationary": 30,
            "update": 1,
            "zone_entered": 6,
            "zone_left": 6,
        },
    },
    5: {
        "sha256": "dba7af7658118ffde59bea1c5b3199552bafdb83b632a0cbdc98904245fe0952",
        "events": {
            "active": 1,
            "end": 2,
            "line_crossed": 3,
            "new": 22,
            "stationary": 1,
            "update": 18,
            "zone_entered": 9,
            "zone_left": 7,
        },
    },
    6: {
        "sha256": "7c0cd2922b54a81a77818609f9d8eb16e921fba942f9da241654cb4e5252730b",
        "events": {
            "active": 16,
            "end": 9,
            "line_crossed": 3,
            "new": 29,
            "stationary": 21,
            "update": 20,
            "zone_entered": 5,
            "zone_left": 4,
        },
    },
    7: {
        "sha256": "420084329c53f798fe17ece6a15d2f8b644c29d1d9c0953043208d5b8efd41be",
        "events": {"end": 2, "new": 7, "update": 4},
    },
    8: {
        "sha256": "735d6fbb0fce652bea01ef1c809cc553eff03fcdd483b5b7b83d1ed93e717e56",
        "events": {
            "active": 2,
            "end": 5,
            "new": 6,
            "stationary": 2,
            "update": 1,
            "zone_entered": 1,
            "zone_left": 1,
        },
    },
    9: {
        "sha256": "e701e5ca534c479ae60340919854eef791b5cf283c8d9869ac9344dac3f329b4",
        "events": {
            "active": 10,
            "end": 8,
            "new": 13,
            "stationary": 22,
            "update": 1,
            "zone_entered": 2,
            "zone_left": 2,
        },
    },
    10: {
        "sha256": "218b24f5bc52ee4b601c0328a928edcec90e22c3498af70af4b31af2e00da0a3",
        "events": {
            "active": 4,
            "end": 7,
            "line_crossed": 2,
            "new": 13,
            "stationary": 4,
            "update": 9,
            "zone_entered": 5,
            "zone_left": 2,
        },
    },
    11: {
        "sha256": "53bccc8e3f2e67709a8d21ff0231250ec4eb47147827b4f0d3915deda561d088",
        "events": {"active": 13, "end": 22, "new": 42, "stationary": 39, "update": 8},
    },
    12: {
        "sha256": "32be130280685fd14239857ed1b44f6e5461a72f4ffe1f6e836d706569a85724",
        "events": {
            "active": 61,
            "end": 7,
            "line_crossed": 1,
            "new": 28,
            "stationary": 64,
            "update": 25,
            "zone_entered": 6,
            "zone_left": 6,
        },
    },
    13: {
        "sha256": "84da140c198d45499df5e7671b59600c67010558b9c3b5bdebe9f78c4a34c964",
        "events": {
            "active": 5,
            "end": 4,
            "line_crossed": 2,
            "new": 10,
            "stationary": 7,
            "update": 3,
        },
    },
    14: {
        "sha256": "65ae832820e0d9560088f8674c34a271077f69bf4aab2ab2a6e3bf9863d68cca",
        "events": {
            "active": 11,
            "dwell_exceeded": 3,
            "end": 18,
            "new": 23,
            "stationary": 24,
            "update": 4,
            "zone_entered": 7,
            "zone_left": 5,
        },
    },
    15: {
        "sha256": "78ad6897efaeb3da474f8052f53dba9c2c52c0beed0358c88573d61d8b4ee942",
        "events": {
            "active": 4,
            "end": 5,
            "line_crossed": 1,
            "new": 6,
            "stationary": 10,
            "update": 3,
        },
    },
    16: {
        "sha256": "f6e6c23c2a85e62a07403d82907d98c6cdecc2f5fc3c2ca4138944418682b0d1",
        "events": {
            "active": 18,
            "end": 7,
            "line_crossed": 2,
            "new": 27,
            "stationary": 37,
            "update": 2,
        },
    },
    17: {
        "sha256": "d2c9d80f7b9fd9dbd5f82113884d03aa146cec0ec8ec10de3bc6372d63258d08",
        "events": {
            "active": 17,
            "end": 12,
            "line_crossed": 7,
            "new": 30,
            "stationary": 39,
            "update": 13,
            "zone_entered": 4,
            "zone_left": 4,
        },
    },
    18: {
        "sha256": "87d7ae6db6b85f179456003cd0e2566950738a41438bd4e77361797dae542d41",
        "events": {
            "active": 10,
            "line_crossed": 2,
            "new": 20,
            "stationary": 21,
            "update": 5,
            "zone_entered": 3,
            "zone_left": 2,
        },
    },
    19: {
        "sha256": "db082de0384650fa95779aec68679e97426c3c4af5ea182ef4581fb6f08fa24d",
        "events": {
            "active": 9,
            "end": 6,
            "line_crossed": 3,
            "new": 26,
            "stationary": 11,
            "update": 28,
            "zone_entered": 18,
            "zone_left": 17,
        },
    },
    20: {
        "sha256": "a912496ed9e529461c8cad450b94dc1ce72fbb0d24869af6f8d706eeb8d24e7f",
        "events": {
            "active": 1,
            "end": 3,
            "line_crossed": 6,
            "new": 24,
            "stationary": 1,
            "update": 11,
        },
    },
    21: {
        "sha256": "5f838fdcba0dde3c79bcc10dbd9b4688292630bee6e2252e4ebf51e34c79e806",
        "events": {
            "active": 1,
            "end": 3,
            "line_crossed": 2,
            "new": 23,
            "stationary": 1,
            "update": 9,
            "zone_entered": 10,
            "zone_left": 7,
        },
    },
    22: {
        "sha256": "2fff35a8f6cd2e13e1a9811b37f1d36eef070091063cdf09d9361f3946e4513b",
        "events": {"active": 7, "end": 10, "new": 11, "stationary": 9, "update": 1},
    },
    23: {
        "sha256": "77ade0f098c907e6487b4fea3f001865ce2a453745708da18f1cceda598121fc",
        "events": {
            "active": 25,
            "dwell_exceeded": 1,
            "end": 9,
            "new": 31,
            "stationary": 24,
            "update": 21,
            "zone_entered": 15,
            "zone_left": 10,
        },
    },
}


@pytest.mark.parametrize("seed", sorted(GOLDEN))
def test_the_engine_gives_what_it_gave_before(seed: int) -> None:
    assert digest(seed) == GOLDEN[seed]


def test_the_scenes_reach_every_kind_of_event() -> None:
    kinds: Counter[str] = Counter()
    for golden in GOLDEN.values():
        kinds.update(golden["events"])
    expected = {"new", "update", "end", "line_crossed", "zone_entered", "zone_left"}
    assert expected | {"dwell_exceeded", "stationary", "active"} <= set(kinds)


if __name__ == "__main__":
    print({seed: digest(seed) for seed in range(24)})
