"""The rules engine on scripted tracks: crossings, zones, dwell, stationary, lifecycle."""

import json
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from strata.edge.rules.engine import RulesEngine
from strata.edge.rules.events import type_name
from strata.edge.rules.frame import TrackFrame
from strata.shared.config import validate_model
from strata.shared.config.rules import RulesConfig
from strata.shared.contracts import events_pb2

NS = 1_000_000_000
SIZE = (1000, 1000)
LABELS = ("person", "car")


@dataclass(frozen=True)
class T:
    """A track at one frame: its reference point (bottom centre) in pixels."""

    id: int
    x: float
    y: float
    obs: bool = True
    conf: bool = True
    cls: int = 0
    score: float = 0.9
    w: float = 40
    h: float = 80


def frame(t_s: float, tracks: list[T], ended: tuple[int, ...] = ()) -> TrackFrame:
    boxes = np.array([[t.x - t.w / 2, t.y - t.h, t.x + t.w / 2, t.y] for t in tracks]).reshape(
        -1, 4
    )
    return TrackFrame(
        camera_id="cam",
        capture_ns=round(t_s * NS),
        frame_size=SIZE,
        track_ids=np.array([t.id for t in tracks], np.uint64),
        boxes=boxes,
        scores=np.array([t.score for t in tracks], np.float64),
        class_ids=np.array([t.cls for t in tracks], np.int64),
        confirmed=np.array([t.conf for t in tracks], bool),
        observed=np.array([t.obs for t in tracks], bool),
        labels=LABELS,
        ended=ended,
    )


def rules(cam: dict[str, Any] | None = None, **top: Any) -> RulesConfig:
    base: dict[str, Any] = {
        # Moving down across y = 0.5 is "in" (below is right of a -> b, y down).
        "lines": [{"name": "door", "points": [[0.0, 0.5], [1.0, 0.5]], "in_side": "right"}],
        "zones": [{"name": "shop", "points": [[0.6, 0.6], [0.9, 0.6], [0.9, 0.9], [0.6, 0.9]]}],
    }
    base.update(cam or {})
    return validate_model(RulesConfig, {"cameras": {"cam": base}, **top})


def engine(cfg: RulesConfig | None = None, edge: str = "edge-a") -> RulesEngine:
    return RulesEngine(cfg or rules(), edge, wall_ns=lambda: 1_000 * NS)


def run(eng: RulesEngine, frames: list[TrackFrame]) -> list[events_pb2.TrackEvent]:
    out: list[events_pb2.TrackEvent] = []
    for f in frames:
        out += eng.process(f)
    return out


def kinds(events: list[events_pb2.TrackEvent]) -> list[str]:
    return [type_name(e.type) for e in events]


def crossings(events: list[events_pb2.TrackEvent]) -> list[tuple[int, str]]:
    return [
        (e.track_id, "in" if e.direction == events_pb2.CROSSING_DIRECTION_IN else "out")
        for e in events
        if e.type == events_pb2.TRACK_EVENT_TYPE_LINE_CROSSED
    ]


def walk(track: int, ys: list[float], t0: float = 0.0, dt: float = 0.2, **kw: Any) -> list[T]:
    return [T(track, 200.0, y, **kw) for y in ys]


def test_a_crossing_between_two_kept_frames_with_a_predicted_position_counts() -> None:
    eng = engine(
        rules(
            {
                "lines": [
                    {
                        "name": "door",
                        "points": [[0, 0.5], [1, 0.5]],
                        "in_side": "right",
                        "debounce_s": 0,
                    }
                ]
            }
        )
    )
    # Kept frames at 0.0 s and 1.0 s; the tracker predicted the dropped ones between. The
    # crossing happens between two predicted positions (0.45 -> 0.55).
    frames = [
        frame(0.0, [T(1, 200, 350)]),
        frame(0.2, [T(1, 200, 400, obs=False)]),
        frame(0.4, [T(1, 200, 450, obs=False)]),
        frame(0.6, [T(1, 200, 550, obs=False)]),
        frame(0.8, [T(1, 200, 600, obs=False)]),
        frame(1.0, [T(1, 200, 650)]),
    ]
    events = run(eng, frames)
    crossed = [e for e in events if e.type == events_pb2.TRACK_EVENT_TYPE_LINE_CROSSED]
    assert len(crossed) == 1 and crossings(crossed) == [(1, "in")]
    assert not crossed[0].observed and crossed[0].positions == 2
    assert crossed[0].observed_positions == 0
    # Only kept frames (every fifth): the long step still crosses, and it was observed.
    eng2 = engine(
        rules(
            {
                "lines": [
                    {
                        "name": "door",
                        "points": [[0, 0.5], [1, 0.5]],
                        "in_side": "right",
                        "debounce_s": 0,
                    }
                ]
            }
        )
    )
    kept = run(eng2, [frames[0], frames[-1]])
    assert crossings(kept) == [(1, "in")]
    ev = next(e for e in kept if e.type == events_pb2.TRACK_EVENT_TYPE_LINE_CROSSED)
    assert ev.observed and ev.observed_positions == 2


def test_both_directions_are_counted_apart() -> None:
    eng = engine()
    a = [T(1, 200, y) for y in (300, 400, 600, 700, 800)]  # down: in
    b = [T(2, 500, y) for y in (800, 700, 450, 300, 200)]  # up: out
    run(eng, [frame(0.25 * i, [a[i], b[i]]) for i in range(5)])
    counts = {(c.rule, c.direction): c.value for c in eng.counts() if c.kind == "crossings"}
    assert counts == {("door", "in"): 1, ("door", "out"): 1}


def test_crossing_back_and_forth_counts_each_real_crossing() -> None:
    eng = engine()
    ys = [300, 600, 650, 700, 400, 350, 300, 600, 650, 700]  # in, out, in (each held 0.5 s+)
    events = run(eng, [frame(0.25 * i, [T(1, 200, y)]) for i, y in enumerate(ys)])
    assert [d for _, d in crossings(events)] == ["in", "out", "in"]


def test_jitter_around_the_line_is_debounced() -> None:
    eng = engine()
    # Standing on the line: its point wobbles across it every frame for 2 s, then it
    # walks on down. One crossing, in.
    ys = [450] + [490, 510] * 10 + [600, 700, 800]
    events = run(eng, [frame(0.1 * i, [T(1, 200, y)]) for i, y in enumerate(ys)])
    assert crossings(events) == [(1, "in")]
    # Without the debounce every wobble counts.
    raw = engine(
        rules(
            {
                "lines": [
                    {
                        "name": "door",
                        "points": [[0, 0.5], [1, 0.5]],
                        "in_side": "right",
                        "debounce_s": 0,
                    }
                ]
            }
        )
    )
    n = len(crossings(run(raw, [frame(0.1 * i, [T(1, 200, y)]) for i, y in enumerate(ys)])))
    assert n > 10


def test_a_crossing_in_its_debounce_when_the_track_ends_counts() -> None:
    eng = engine()
    events = run(
        eng,
        [frame(0.0, [T(1, 200, 450)]), frame(0.1, [T(1, 200, 560)]), frame(0.2, [], ended=(1,))],
    )
    assert kinds(events) == ["new", "line_crossed", "end"]


def test_only_confirmed_tracks_count() -> None:
    eng = engine()
    # Track 1 is never confirmed (a false detection): nothing at all, one count.
    # Track 2 crosses while tentative, then is confirmed: new, then its crossing.
    f = [
        frame(0.0, [T(1, 200, 300, conf=False), T(2, 500, 300, conf=False)]),
        frame(0.5, [T(1, 200, 700, conf=False), T(2, 500, 700, conf=False)]),
        frame(1.0, [T(1, 200, 800, conf=False), T(2, 500, 800, conf=True)]),
        frame(1.5, [], ended=(1, 2)),
    ]
    events = run(eng, f)
    assert {e.track_id for e in events} == {2}
    assert kinds(events) == ["new", "line_crossed", "end"]
    assert eng.camera("cam").counts.unconfirmed == 1


def test_zone_inertia_frames_to_enter_and_leave() -> None:
    cfg = rules(
        {
            "lines": [],
            "zones": [
                {
                    "name": "shop",
                    "enter_frames": 3,
                    "leave_frames": 2,
                    "points": [[0.6, 0.6], [0.9, 0.6], [0.9, 0.9], [0.6, 0.9]],
                }
            ],
        }
    )
    eng = engine(cfg)
    inside, outside = T(1, 750, 750), T(1, 500, 750)
    # Two frames inside are not enough; three are; one frame out is not leaving; two are.
    seq = [
        outside,
        inside,
        inside,
        outside,
        inside,
        inside,
        inside,
        outside,
        inside,
        outside,
        outside,
    ]
    out = []
    for i, t in enumerate(seq):
        out.append(kinds(eng.process(frame(0.1 * i, [t]))))
    assert out[6] == ["zone_entered"] and out[10] == ["zone_left"]
    assert sum(len(o) for o in out) == 3  # new, entered, left
    entered = next(
        e
        for e in run(engine(cfg), [frame(0.1 * i, [t]) for i, t in enumerate(seq)])
        if e.type == events_pb2.TRACK_EVENT_TYPE_ZONE_ENTERED
    )
    assert entered.positions == 3 and entered.after.current_zones == ["shop"]
    assert list(entered.after.entered_zones) == ["shop"] and not entered.before.current_zones


def test_zone_label_and_area_filters() -> None:
    cfg = rules(
        {
            "lines": [],
            "zones": [
                {
                    "name": "shop",
                    "labels": ["car"],
                    "min_area": 0.005,
                    "points": [[0.6, 0.6], [0.9, 0.6], [0.9, 0.9], [0.6, 0.9]],
                }
            ],
        }
    )
    eng = engine(cfg)
    events = run(
        eng,
        [
            frame(
                0.0,
                [
                    T(1, 750, 750, cls=0, w=100, h=100),
                    T(2, 700, 700, cls=1, w=20, h=20),
                    T(3, 800, 800, cls=1, w=100, h=100),
                ],
            ),
        ],
    )
    assert [(e.track_id, type_name(e.type)) for e in events if e.zone] == [(3, "zone_entered")]
    assert {(c.rule, c.label): c.value for c in eng.counts() if c.kind == "occupancy"} == {
        ("shop", "car"): 1
    }


def test_dwell_fires_once_per_visit() -> None:
    cfg = rules({"lines": [], "dwell": [{"name": "loiter", "zone": "shop", "seconds": 5}]})
    eng = engine(cfg)
    visit = [frame(0.5 * i, [T(1, 700 + 10 * (i % 2) * 5, 750)]) for i in range(30)]  # 15 s in
    away = [frame(15 + 0.5 * i, [T(1, 300, 300 + 20 * (i % 2) * 5)]) for i in range(4)]
    back = [frame(17 + 0.5 * i, [T(1, 720 + 10 * (i % 2) * 5, 780)]) for i in range(14)]  # 7 s
    events = run(eng, visit + away + back)
    dwell = [e for e in events if e.type == events_pb2.TRACK_EVENT_TYPE_DWELL_EXCEEDED]
    assert len(dwell) == 2 and all(e.rule == "loiter" and e.zone == "shop" for e in dwell)
    assert 5.0 <= dwell[0].dwell_s < 5.6
    assert dwell[0].capture_ns == 5 * NS


def test_dwell_runs_on_the_clock_while_the_track_is_unseen() -> None:
    # Seen in the zone for 1 s, then missed by the detector (frames without it, another
    # track far away) until 6 s: the dwell fires at 3 s, not when it is seen again.
    cfg = rules({"lines": [], "dwell": [{"name": "loiter", "zone": "shop", "seconds": 3}]})
    eng = engine(cfg)
    seen = [frame(0.5 * i, [T(1, 700, 750), T(2, 100, 100)]) for i in range(3)]
    unseen = [frame(1.5 + 0.5 * i, [T(2, 100, 100)]) for i in range(9)]
    back = [frame(6.0, [T(1, 700, 750), T(2, 100, 100)])]
    events = run(eng, seen + unseen + back)
    dwell = [e for e in events if e.type == events_pb2.TRACK_EVENT_TYPE_DWELL_EXCEEDED]
    assert [(e.track_id, e.capture_ns) for e in dwell] == [(1, 3 * NS)]
    assert dwell[0].dwell_s == 3.0 and dwell[0].zone == "shop"
    # An empty frame moves the clock too.
    eng = engine(cfg)
    events = run(eng, [*seen, frame(4.0, [])])
    assert [e.capture_ns for e in events if e.rule == "loiter"] == [4 * NS]


def test_a_parked_object_gives_one_new_and_no_updates_until_it_moves() -> None:
    eng = engine(rules({"lines": [], "zones": [], "stationary": {"seconds": 10}}))
    rng = np.random.default_rng(4)
    frames = []
    for i in range(600):  # 2 minutes at 5 fps: the box jitters, the label flickers
        jx, jy = rng.normal(0, 2, 2)
        cls = 0 if i % 7 == 3 else 1  # mostly car, now and then person
        frames.append(
            frame(0.2 * i, [T(9, 400 + jx, 500 + jy, cls=cls, w=200, h=120, obs=i % 3 != 2)])
        )
    events = run(eng, frames)
    assert kinds(events) == ["new", "stationary"]
    assert events[1].after.stationary and eng.is_stationary("cam", 9)
    moved = run(
        eng,
        [frame(120 + 0.2 * i, [T(9, 400 + 60 * i, 500, cls=1, w=200, h=120)]) for i in range(1, 4)],
    )
    assert kinds(moved)[0] == "active" and not eng.is_stationary("cam", 9)


def test_updates_only_when_the_label_changes() -> None:
    eng = engine(rules({"lines": [], "zones": []}))
    ids = [0] * 10 + [1] * 30  # the detector's class settles on car after 10 frames
    events = run(eng, [frame(0.1 * i, [T(1, 100 + 10 * i, 300, cls=c)]) for i, c in enumerate(ids)])
    assert kinds(events) == ["new", "update"]
    assert events[1].before.label == "person" and events[1].after.label == "car"


def test_exactly_one_end_per_track() -> None:
    eng = engine(rules({"lines": [], "zones": []}, end_after_s=2))
    f = [
        frame(0.0, [T(1, 100, 100), T(2, 300, 300)]),
        frame(0.5, [T(1, 110, 100), T(2, 310, 300)], ended=()),
        frame(1.0, [T(2, 320, 300)], ended=(1,)),
        frame(1.5, [T(2, 330, 300)], ended=(1, 77)),  # said twice, and an unknown id
        frame(5.0, [T(3, 500, 500)]),  # track 2 unseen 3.5 s > end_after_s: it ends
        frame(6.0, [], ended=(3,)),
    ]
    events = run(eng, f)
    ends = [e.track_id for e in events if e.type == events_pb2.TRACK_EVENT_TYPE_END]
    assert sorted(ends) == [1, 2, 3]
    end1 = next(e for e in events if e.type == events_pb2.TRACK_EVENT_TYPE_END and e.track_id == 1)
    assert end1.after.end_time == pytest.approx(0.5) and end1.before.end_time == 0


def test_keys_sequences_and_paths() -> None:
    eng = engine()
    events = run(
        eng,
        [frame(0.25 * i, [T(1, 200, 300 + 100 * i)]) for i in range(6)]
        + [frame(2.0, [], ended=(1,))],
    )
    assert [e.sequence for e in events] == list(range(1_000_000_000, 1_000_000_000 + len(events)))
    assert [e.track_sequence for e in events] == list(range(len(events)))
    assert len({e.idempotency_key for e in events}) == len(events)
    new = events[0]
    assert new.idempotency_key == f"cam/{new.track_uid}/0/new" and new.track_uid == "0-1"
    assert not new.HasField("before") and new.edge_id == "edge-a"
    end = events[-1]
    assert end.path.count == 6 and end.path.first_seen_ns == 0
    assert [p.y for p in end.path.points] == pytest.approx([0.3, 0.4, 0.5, 0.6, 0.7, 0.8])
    assert (end.frame_width, end.frame_height) == SIZE


def test_a_camera_moved_with_its_checkpoint_replays_the_same_events() -> None:
    frames = [
        frame(0.25 * i, [T(1, 200, 300 + 50 * i), T(2, 750, 500 + 30 * i)]) for i in range(12)
    ] + [frame(4.0, [], ended=(1, 2))]
    whole = run(engine(), frames)
    first = engine()
    before = run(first, frames[:5])
    state = first.snapshot()
    moved = engine(edge="edge-b")
    moved.restore(json.loads(json.dumps(state)))  # as the checkpoint file carries it
    after = run(moved, frames[5:])
    keys = [e.idempotency_key for e in before + after]
    assert keys == [e.idempotency_key for e in whole]
    assert [e.sequence for e in before + after] == [e.sequence for e in whole]
    assert {e.edge_id for e in after} == {"edge-b"}
    # The counts moved with the camera: both tracks went down across the door (track 2
    # from a start exactly on it) and track 2 into the shop.
    counts = {(c.kind, c.rule, c.direction, c.label): c.value for c in moved.counts()}
    assert counts[("crossings", "door", "in", "person")] == 2
    assert counts[("entries", "shop", "", "person")] == 1


def test_a_bad_checkpoint_is_refused_and_changes_nothing() -> None:
    eng = engine()
    run(eng, [frame(0.0, [T(1, 200, 300)])])
    before = eng.snapshot()
    good = before["cam"]
    bad = {"cam": {**good, "tracks": [{**good["tracks"][0], "pos": [1, 2, 3]}]}}
    with pytest.raises(ValueError):
        eng.restore(bad)
    assert eng.snapshot() == before


def test_new_rules_keep_the_tracks() -> None:
    eng = engine()
    run(eng, [frame(0.0, [T(1, 200, 300)])])
    eng.reconfigure(
        rules(
            {
                "lines": [{"name": "door", "points": [[0.0, 0.5], [1.0, 0.5]], "in_side": "right"}],
                "zones": [],
            }
        )
    )
    events = run(eng, [frame(0.5, [T(1, 200, 700)]), frame(1.0, [T(1, 200, 800)])])
    assert kinds(events) == ["line_crossed"]  # no second new: the track was kept


def test_frames_are_needed_near_a_line_or_a_dwell_limit() -> None:
    eng = engine(rules({"dwell": [{"name": "loiter", "zone": "shop", "seconds": 5}]}))
    run(eng, [frame(0.0, [T(1, 200, 100)]), frame(0.5, [T(1, 200, 150)])])
    assert not eng.needs_frames("cam", horizon_s=0.5)  # 0.15, at 0.1 per second
    run(eng, [frame(1.0, [T(1, 200, 400)]), frame(1.5, [T(1, 200, 440)])])
    need = eng.needs_frames("cam", horizon_s=0.5)
    assert need.line and not need.zone  # heading for y = 0.5
    run(eng, [frame(2.0 + 0.5 * i, [T(1, 750, 750)]) for i in range(8)])  # in the shop 3.5 s
    assert eng.needs_frames("cam", horizon_s=0.5).dwell
    assert not engine().needs_frames("other", 1.0)


def test_frames_out_of_order_are_counted_not_evaluated() -> None:
    eng = engine()
    run(eng, [frame(1.0, [T(1, 200, 300)])])
    assert eng.process(frame(0.5, [T(1, 200, 700)])) == []
    assert eng.camera("cam").counts.out_of_order == 1


def test_a_walk_without_rules_is_one_new_and_one_end() -> None:
    eng = RulesEngine(RulesConfig(), "edge-a")  # no rules for any camera: lifecycle only
    frames = [frame(0.1 * i, [T(4, 10 + 8 * i, 500, obs=i % 4 == 0)]) for i in range(100)]
    assert kinds(run(eng, [*frames, frame(10.0, [], ended=(4,))])) == ["new", "end"]


def test_pixel_coordinates_survive_a_change_of_resolution() -> None:
    # The line is given in pixels of a 1920 x 1080 camera; frames come at 960 x 540.
    cfg = validate_model(
        RulesConfig,
        {
            "cameras": {
                "cam": {
                    "frame_size": [1920, 1080],
                    "lines": [
                        {"name": "door", "points": [[0, 540], [1920, 540]], "in_side": "right"}
                    ],
                }
            }
        },
    )
    eng = engine(cfg)
    small = [
        TrackFrame(
            "cam",
            i * NS // 2,
            (960, 540),
            np.array([1], np.uint64),
            np.array([[100.0, y - 40, 140.0, y]]),
            np.array([0.9]),
            np.array([0]),
            np.array([True]),
            np.array([True]),
            LABELS,
        )
        for i, y in enumerate([200, 260, 300, 350])
    ]
    assert crossings(run(eng, small)) == [(1, "in")]


def _door(debounce_s: float = 0.5) -> RulesConfig:
    door = {"name": "door", "points": [[0, 0.5], [1, 0.5]], "in_side": "right"}
    return rules({"lines": [{**door, "debounce_s": debounce_s}], "zones": []})


def test_a_crossing_between_two_kept_frames_far_apart_counts_once() -> None:
    # Kept frames 3 s apart on either side of the line, nothing between them: the step
    # crosses, once; the frames after it on the far side add nothing.
    far = [frame(0.0, [T(1, 200, 100)]), frame(3.0, [T(1, 300, 900)])]
    far += [frame(3.0 + 0.1 * i, [T(1, 300, 900 + i)]) for i in range(1, 10)]
    assert crossings(run(engine(_door()), far)) == [(1, "in")]
    # The same gap answered by the tracker's predictions, which overshoot, fall back across
    # the line and cross again before the next kept frame: still one crossing, in.
    predicted = [frame(0.0, [T(1, 200, 100)])]
    ys = [300, 520, 560, 480, 530, 700]
    predicted += [frame(0.5 * (i + 1), [T(1, 200, y, obs=False)]) for i, y in enumerate(ys)]
    predicted += [frame(3.5, [T(1, 200, 900)]), frame(4.5, [T(1, 200, 910)])]
    events = run(engine(_door()), predicted)
    assert crossings(events) == [(1, "in")]
    assert kinds(events).count("line_crossed") == 1


def test_a_crossing_on_a_long_jump_is_found_among_quiet_frames() -> None:
    # Many frames on one side (nothing changes: the quiet path), then one long step over
    # the line and many frames on the other side.
    eng = engine(_door(debounce_s=0))
    above = [frame(0.1 * i, [T(1, 200 + i, 100), T(2, 600, 950)]) for i in range(30)]
    below = [frame(3.0 + 0.1 * i, [T(1, 230, 940), T(2, 600, 950)]) for i in range(30)]
    events = run(eng, above + below)
    assert crossings(events) == [(1, "in")]
    hit = next(e for e in events if e.type == events_pb2.TRACK_EVENT_TYPE_LINE_CROSSED)
    assert hit.capture_ns == 3 * NS and hit.observed


def test_a_long_stay_in_a_zone_then_leaving_reports_the_leave_run_and_the_stay() -> None:
    cfg = rules(
        {
            "lines": [],
            "zones": [
                {
                    "name": "shop",
                    "enter_frames": 2,
                    "leave_frames": 3,
                    "points": [[0.6, 0.6], [0.9, 0.6], [0.9, 0.9], [0.6, 0.9]],
                }
            ],
        }
    )
    eng = engine(cfg)
    # 40 frames still inside (no state changes), 1 frame out, back in, then 3 frames out.
    stay = [frame(0.1 * i, [T(1, 750, 750)]) for i in range(40)]
    blip = [frame(4.0, [T(1, 500, 750)]), frame(4.1, [T(1, 750, 750)])]
    out = [frame(4.2 + 0.1 * i, [T(1, 500, 750, obs=i != 1)]) for i in range(3)]
    events = run(eng, stay + blip + out)
    assert kinds(events) == ["new", "zone_entered", "zone_left"]
    left = events[-1]
    assert left.positions == 3 and left.observed_positions == 2
    assert left.capture_ns == round(4.4 * NS)
    # The visit: from the first position inside to the first one of the run outside.
    assert left.dwell_s == pytest.approx(4.2)


def test_tracks_time_out_across_empty_frames_and_later_arrivals() -> None:
    eng = engine(rules({"lines": [], "zones": []}, end_after_s=2))
    f = [frame(0.0, [T(1, 100, 100)])]
    f += [frame(0.5 * i, []) for i in range(1, 12)]  # track 1 unseen past 2 s: ends
    f += [frame(10.0, [T(2, 100, 100)])]  # after frames with no track at all
    f += [frame(10.0 + 0.5 * i, []) for i in range(1, 6)]  # so does track 2
    events = run(eng, f)
    ends = [(e.track_id, e.capture_ns) for e in events if type_name(e.type) == "end"]
    assert ends == [(1, round(2.5 * NS)), (2, round(12.5 * NS))]


def test_predicted_boxes_do_not_vote_for_the_label() -> None:
    eng = engine(rules({"lines": [], "zones": []}))
    events = run(
        eng,
        [
            frame(0.0, [T(1, 100, 100, cls=1, score=0.5)]),
            # Predicted boxes do not vote: the class they carry changes nothing.
            frame(0.1, [T(1, 110, 100, obs=False, cls=0, score=0.9)]),
            frame(0.2, [T(1, 120, 100, obs=False, cls=0, score=0.9)]),
        ],
    )
    assert kinds(events) == ["new"] and events[0].after.label == "car"
    # A detection does.
    events = run(eng, [frame(0.3, [T(1, 130, 100, cls=0, score=0.9)])])
    assert kinds(events) == ["update"] and events[0].after.label == "person"
    assert events[0].after.top_score == pytest.approx(0.9)


def _random_scene(seed: int, frames: int) -> list[TrackFrame]:
    """Tracks that come, walk, stop, turn, are predicted or detected, and go."""
    rng = np.random.default_rng(seed)
    live: dict[int, list[Any]] = {}
    out = []
    for i in range(frames):
        if rng.random() < 0.25 or not live:
            live[len(out) * 10 + 1] = [rng.random(2) * 800 + 100, rng.normal(0, 15, 2), 0]
        ended = tuple(t for t in live if rng.random() < 0.03)
        for t in ended:
            del live[t]
        tracks = []
        for t, s in live.items():
            if rng.random() < 0.1:
                s[1] = rng.normal(0, 15, 2) * (rng.random() < 0.7)  # turn, or stop
            s[0] = np.clip(s[0] + s[1] + rng.normal(0, 2, 2), 50, 950)
            s[2] += 1
            cls = int(rng.random() < 0.2)
            obs = bool(rng.random() < 0.5)
            tracks.append(T(t, s[0][0], s[0][1], obs=obs, conf=s[2] > 1, cls=cls))
        out.append(frame(0.1 * i, tracks, ended))
    return out


def test_an_engine_restored_at_every_frame_says_what_one_that_ran_through_says() -> None:
    # What the engine keeps between frames beyond its checkpoint (the quiet-frame shortcuts,
    # caches of rows, labels and time-outs) never changes an event.
    cfg = rules(
        {
            "lines": [
                {"name": "door", "points": [[0.0, 0.5], [1.0, 0.5]], "debounce_s": 0.2},
                {"name": "gate", "points": [[0.3, 0.0], [0.3, 1.0]], "labels": ["person"]},
            ],
            "zones": [
                {
                    "name": "shop",
                    "points": [[0.6, 0.6], [0.9, 0.6], [0.9, 0.9], [0.6, 0.9]],
                    "enter_frames": 2,
                    "leave_frames": 3,
                },
                {"name": "lot", "points": [[0.1, 0.1], [0.5, 0.1], [0.3, 0.4]], "labels": ["car"]},
            ],
            "dwell": [{"name": "loiter", "zone": "shop", "seconds": 1}],
            "stationary": {"seconds": 0.5},
        },
        end_after_s=1.5,
    )
    scene = _random_scene(7, 250)
    through = engine(cfg)
    expected = [_as_set(through.process(f)) for f in scene]
    got = []
    snapshot = None
    for f in scene:
        eng = engine(cfg)
        if snapshot is not None:
            eng.restore(json.loads(json.dumps(snapshot)))
        got.append(_as_set(eng.process(f)))
        snapshot = eng.snapshot()
    assert got == expected
    assert sum(len(e) for e in expected) > 150
    seen = {type_name(events_pb2.TrackEvent.FromString(b).type) for e in expected for b in e}
    assert {"line_crossed", "zone_entered", "zone_left", "dwell_exceeded", "stationary"} <= seen


def _as_set(events: list[events_pb2.TrackEvent]) -> list[bytes]:
    """One frame's events in a canonical order, camera sequence left out (a restored engine
    numbers its rows, and so orders the events of one frame, its own way)."""
    out = []
    for e in events:
        e.sequence = 0
        out.append(e.SerializeToString())
    return sorted(out)


def test_a_camera_without_rules_while_the_rules_camera_is_unseen_is_said_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The edge learns its cameras from their frames: a camera without rules that turns up
    while the rules' camera has not gets one warning with the likely misspelling."""
    eng = RulesEngine(validate_model(RulesConfig, {"cameras": {"cma": {}}}), "edge-a")
    with caplog.at_level("WARNING", logger="strata.edge.rules.engine"):
        eng.camera("cam")
        eng.camera("cam")  # the same camera again: said once
    (msg,) = [r.getMessage() for r in caplog.records]
    assert "camera 'cam' has no rules" in msg and "is 'cma' meant to be 'cam'?" in msg
    caplog.clear()
    with caplog.at_level("WARNING", logger="strata.edge.rules.engine"):
        eng.camera("cma")  # the rules' own camera
        eng.camera("yard")  # nothing unseen left
    assert caplog.records == []
