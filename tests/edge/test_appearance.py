"""Appearance in the tracker (edge/tracking/looks.py, appearance.py): scenes built to swap
ids, re-linking after an occlusion, and bad input (issue 42)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from strata.edge.tracking.appearance import (
    AppearanceError,
    Embedder,
    from_proto,
    resolve_backend,
    to_proto,
)
from strata.edge.tracking.tracker import Tracker, TrackerState
from strata.shared.config.appearance import AppearanceConfig
from strata.shared.config.edge import TrackingConfig
from strata.shared.vision import FrameBoxes

MODEL = Path(__file__).resolve().parents[2] / "shared/starter_models/osnet_x0_25_msmt17/model.onnx"

DIM = 512


def _people(n: int, seed: int = 0, alike: float = 0.45) -> np.ndarray:
    """n people's embeddings whose pairwise cosine is about `alike` (OSNet on vtest's
    different people: 0.46), plus a per-look jitter added by `_look`."""
    rng = np.random.default_rng(seed)
    common = rng.normal(size=DIM)
    own = rng.normal(size=(n, DIM))
    v = np.sqrt(alike) * common / np.linalg.norm(common) + np.sqrt(1 - alike) * (
        own / np.linalg.norm(own, axis=1, keepdims=True)
    )
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def _look(people: np.ndarray, who: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """This frame's crops of `who`: the same person about 0.85 cosine to their mean."""
    v = people[who] + 0.45 * rng.normal(size=(who.size, DIM)) / np.sqrt(DIM)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def _run(
    frames: list[tuple[int, np.ndarray, np.ndarray]],
    appearance: bool,
    restart_at: int = -1,
    keep_looks: bool = True,
) -> list[dict]:
    """Per frame: true person -> track id. `restart_at`: before that frame the tracker's
    state goes through a checkpoint's JSON into a new tracker (`keep_looks`: with the
    tracks' embeddings)."""
    cfg = AppearanceConfig() if appearance else None
    tracker = Tracker(TrackingConfig(), cfg)
    people, rng = _people(4), np.random.default_rng(1)
    out = []
    for f, boxes, who in frames:
        if f == restart_at:
            state = TrackerState.model_validate_json(tracker.snapshot().model_dump_json())
            if not keep_looks:
                state = state.model_copy(update={"looks": None})
            tracker = Tracker(TrackingConfig(), cfg)
            tracker.restore(state)
        crops = _look(people, who, rng)
        dets = FrameBoxes(boxes, np.full(len(who), 0.9, np.float32), np.zeros(len(who), np.int32))
        t = tracker.update(f, dets, (lambda idx, c=crops: c[idx]) if appearance else None)
        out.append(dict(zip(who.tolist(), t.track_ids.tolist(), strict=True)))
    return out


def _box(cx: float, cy: float = 160.0) -> list[float]:
    return [cx - 20, cy - 60, cx + 20, cy + 60]


def _meet_and_turn(step: int) -> list[tuple[int, np.ndarray, np.ndarray]]:
    """Two people walk towards each other, meet at frame 10 and both turn back: motion
    predicts each carries on, so without appearance they swap ids."""
    out = []
    for f in range(0, 21, step):
        k = f if f <= 10 else 20 - f
        boxes = np.array([_box(100 + 14 * k), _box(400 - 14 * k)], np.float32)
        out.append((f, boxes, np.array([0, 1])))
    return out


@pytest.mark.parametrize("step", [1, 2, 5])
def test_people_who_meet_and_turn_keep_their_ids_with_appearance(step: int) -> None:
    without = _run(_meet_and_turn(step), appearance=False)
    assert without[-1] == {0: without[0][1], 1: without[0][0]}, "the scene must swap"
    with_ = _run(_meet_and_turn(step), appearance=True)
    assert with_[-1] == with_[0]


def _cross() -> list[tuple[int, np.ndarray, np.ndarray]]:
    """Two people cross paths at a steady pace: motion alone gets it right."""
    out = []
    for f in range(0, 21, 2):
        boxes = np.array([_box(100 + 15 * f), _box(400 - 15 * f)], np.float32)
        out.append((f, boxes, np.array([0, 1])))
    return out


def test_appearance_keeps_what_motion_gets_right() -> None:
    without, with_ = _run(_cross(), False), _run(_cross(), True)
    assert without[-1] == without[0]
    assert with_[-1] == with_[0]


def _occluded(gap: int) -> list[tuple[int, np.ndarray, np.ndarray]]:
    """One person walks, is hidden for `gap` frames (behind a pillar) and comes out 2.5 box
    heights from where they were last seen; another stands far away all along."""
    out = []
    for f in range(0, 10):
        out.append((f, np.array([_box(100 + 5 * f), _box(700)], np.float32), np.array([0, 1])))
    for f in range(10, 10 + gap):
        out.append((f, np.array([_box(700)], np.float32), np.array([1])))
    back = 10 + gap
    for f in range(back, back + 5):
        cx = 145 + 300 + 5 * (f - back)
        out.append((f, np.array([_box(cx), _box(700)], np.float32), np.array([0, 1])))
    return out


def test_a_lost_track_is_relinked_when_it_reappears() -> None:
    without = _run(_occluded(20), appearance=False)
    assert without[-1][0] != without[0][0], "the scene must lose the id without appearance"
    with_ = _run(_occluded(20), appearance=True)
    assert with_[-1][0] == with_[0][0]
    assert with_[-1][1] == with_[0][1]


def test_no_relink_past_the_window() -> None:
    frames = _occluded(AppearanceConfig().relink_frames + 10)
    out = _run(frames, appearance=True)
    assert out[-1][0] != out[0][0]


def test_an_embedding_of_the_wrong_size_is_refused() -> None:
    tracker = Tracker(TrackingConfig(), AppearanceConfig())
    dets = FrameBoxes(
        np.array([_box(100)], np.float32), np.array([0.9], np.float32), np.zeros(1, np.int32)
    )
    with pytest.raises(ValueError, match="dim 512"):
        tracker.update(0, dets, lambda idx: np.ones((idx.size, 128), np.float32))
    msg = to_proto(np.ones(DIM), 3, "osnet_x0_25_msmt17")
    assert msg.dim == DIM and len(msg.float16) == 2 * DIM and msg.samples == 3
    assert np.allclose(from_proto(msg), np.ones(DIM) / np.sqrt(DIM), atol=1e-3)
    msg.float16 = msg.float16[:-2]
    with pytest.raises(ValueError, match="malformed"):
        from_proto(msg)
    with pytest.raises(ValueError, match="same embedding model"):
        from_proto(to_proto(np.ones(256), 1, "other"), dim=DIM)


def test_a_missing_model_says_the_fix(tmp_path) -> None:
    with pytest.raises(AppearanceError, match=r"edge\.appearance\.model"):
        Embedder(AppearanceConfig(model="no_such_model"), tmp_path)
    with pytest.raises(AppearanceError, match="not a file"):
        Embedder(AppearanceConfig(path=str(tmp_path / "missing.onnx")))
    with pytest.raises(AppearanceError, match="not an embedding one"):
        Embedder(AppearanceConfig(model="picodet_s_416"))


def test_the_real_model_embeds_crops() -> None:
    """The shipped OSNet: a crop is nearer to itself shifted by a pixel than to another."""
    emb = Embedder(AppearanceConfig())
    rng = np.random.default_rng(0)
    image = (rng.random((240, 320, 3)) * 255).astype(np.uint8)
    image[:, :160] = (image[:, :160] * 0.3).astype(np.uint8)
    boxes = np.array([[10, 10, 70, 200], [11, 11, 71, 201], [200, 10, 260, 200]], np.float32)
    v = emb.embed(image, boxes)
    assert v.shape == (3, 512)
    assert np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-4)
    assert v[0] @ v[1] > v[0] @ v[2]
    assert emb.crops == 3
    emb.close()


@pytest.mark.parametrize("backend", ["onnxruntime-cpu", "openvino"])
def test_both_back_ends_embed_as_the_plain_formula_does(backend: str) -> None:
    """Each back end, with the in-place crop preparation, against the crop prepared as the
    model card says ((x / 255 - mean) / std, RGB) and run on ONNX Runtime."""
    import cv2
    import onnxruntime as ort

    if backend == "openvino":
        pytest.importorskip("openvino")
    emb = Embedder(AppearanceConfig(backend=backend))
    assert emb.backend == backend
    rng = np.random.default_rng(1)
    image = (rng.random((240, 320, 3)) * 255).astype(np.uint8)
    boxes = np.array([[10.4, 12.2, 70.7, 200.1], [150, 30, 190, 140]], np.float32)
    got = emb.embed(image, boxes)
    emb.close()
    mean, std = np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])
    crops = []
    for x1, y1, x2, y2 in ((10, 12, 71, 201), (150, 30, 190, 140)):
        c = cv2.resize(image[y1:y2, x1:x2], (128, 256), interpolation=cv2.INTER_LINEAR)
        crops.append(((c[:, :, ::-1] / 255.0 - mean) / std).transpose(2, 0, 1))
    session = ort.InferenceSession(str(MODEL), providers=["CPUExecutionProvider"])
    want = session.run(None, {"images": np.stack(crops).astype(np.float32)})[0]
    want /= np.linalg.norm(want, axis=1, keepdims=True)
    assert np.allclose(got, want, atol=1e-4)


def test_auto_takes_openvino_when_it_is_installed() -> None:
    pytest.importorskip("openvino")
    assert resolve_backend("auto") == "openvino"
    assert resolve_backend("onnxruntime-cpu") == "onnxruntime-cpu"


def test_auto_without_openvino_falls_back_and_says_what_it_costs(monkeypatch, caplog) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "openvino" else real(name)
    )
    with caplog.at_level("WARNING"):
        assert resolve_backend("auto") == "onnxruntime-cpu"
    assert "strata[openvino]" in caplog.text


def test_appearance_is_per_camera() -> None:
    cfg = AppearanceConfig(enabled=False, cameras={"door": True})
    assert cfg.on("door") and not cfg.on("yard")
    cfg = AppearanceConfig(enabled=True, cameras={"bathroom": False})
    assert cfg.on("yard") and not cfg.on("bathroom")


def test_on_for_one_camera_and_off_for_another() -> None:
    """edge.appearance.cameras: the door's tracks get embeddings and their events' message,
    the yard's none; the real model on a real frame's crops."""
    from strata.edge.tracking.answers import Answers
    from strata.edge.tracking.appearance import Appearance
    from strata.shared.contracts import frame_pb2

    cfg = AppearanceConfig(cameras={"door": True})
    app = Appearance.for_node(cfg, ("person", "car"))
    assert app is not None
    answers = Answers(TrackingConfig(), app)
    rng = np.random.default_rng(0)
    image = (rng.random((288, 384, 3)) * 255).astype(np.uint8)  # half the source's scale
    dets = FrameBoxes(
        np.array([_box(100), _box(400)], np.float32),
        np.array([0.9, 0.9], np.float32),
        np.zeros(2, np.int32),
    )
    for cam in ("door", "yard"):
        h = frame_pb2.FrameHeader(
            camera_id=cam, session_id=1, frame_index=0, width=384, height=288,
            source_width=768, source_height=576,
        )  # fmt: skip
        tracked, _ = answers.detected(h, dets, image)
        tracker = answers.tracker(1, cam)
        assert tracker is not None
        look = tracker.appearance(int(tracked.track_ids[0]))
        if cam == "door":
            assert look is not None and look[1] == 1
            msg = app.message(*look)
            assert msg.model == "osnet_x0_25_msmt17" and msg.dim == 512
        else:
            assert tracker.looks is None and look is None
    # The door's two people only, the yard's none: the budget's bucket starts full
    # (edge.appearance.max_crops), so a camera's first tracks get their crops.
    assert app.embedder.crops == 2
    assert Appearance.for_node(AppearanceConfig(), ("person",)) is None
    with pytest.raises(AppearanceError, match="not the detector's labels"):
        Appearance.for_node(AppearanceConfig(enabled=True), ("car",))


def test_the_pub_copy_leaves_the_embedding_out() -> None:
    from strata.edge.publish.results import _pub_copy
    from strata.shared.contracts import events_pb2

    ev = events_pb2.TrackEvent(camera_id="door", track_id=3)
    ev.appearance.CopyFrom(to_proto(np.ones(DIM), 2, "osnet_x0_25_msmt17"))
    copy = events_pb2.TrackEvent.FromString(_pub_copy(ev))
    assert not copy.HasField("appearance") and copy.track_id == 3
    assert ev.HasField("appearance"), "the durable copy keeps it"


def test_a_tracks_events_carry_the_mean_of_its_crops_not_the_first_heavy_ema() -> None:
    """The first crop (a person half in view) keeps 0.9 ** n of the EMA; the uplink's
    vector weighs every averaged crop the same."""
    from strata.edge.tracking.reid import FrameLooks, Looks

    looks = Looks(AppearanceConfig())
    first, later = _people(2, seed=3, alike=0.0)
    for frame, v in enumerate([first] + [later] * 9):
        fl = FrameLooks(v[None].astype(np.float32), np.array([True]), np.array([False]))
        looks.learn(np.array([7]), np.array([0]), fl, frame)
    look = looks.of(7)
    assert look is not None and look.samples == 10
    assert float(look.vector @ first) > 0.5  # the EMA still leans on the first crop
    assert float(look.mean @ later) > 0.94 and float(look.mean @ first) < 0.2
    assert abs(float(np.linalg.norm(look.mean)) - 1.0) < 1e-5


def test_a_restarted_edge_remembers_its_tracks_appearance() -> None:
    """The checkpoint carries the tracks' embeddings: restarted while the person is hidden,
    the tracker still re-links them when they come out; without the embeddings it cannot."""
    frames = _occluded(20)
    forgot = _run(frames, appearance=True, restart_at=20, keep_looks=False)
    assert forgot[-1][0] != forgot[0][0], "the scene must lose the id without the embeddings"
    kept = _run(frames, appearance=True, restart_at=20)
    assert kept[-1] == kept[0]


def test_a_checkpoints_embeddings_round_trip_and_bad_ones_are_left_out(caplog) -> None:
    cfg = AppearanceConfig()
    tracker = Tracker(TrackingConfig(), cfg)
    people, rng = _people(2), np.random.default_rng(4)
    for f, boxes, who in _meet_and_turn(1)[:8]:
        crops = _look(people, who, rng)
        dets = FrameBoxes(boxes, np.full(2, 0.9, np.float32), np.zeros(2, np.int32))
        tracker.update(f, dets, lambda idx, c=crops: c[idx])
    state = TrackerState.model_validate_json(tracker.snapshot().model_dump_json())
    assert state.looks is not None and len(state.looks.tracks) == 2
    back = Tracker(TrackingConfig(), cfg)
    back.restore(state)
    for tid in state.ids:
        a, b = tracker.looks.of(tid), back.looks.of(tid)  # type: ignore[union-attr]
        assert a is not None and b is not None and (a.samples, a.frame) == (b.samples, b.frame)
        assert float(a.vector @ b.vector) > 0.9999 and float(a.mean @ b.mean) > 0.9999
    # Another model's size (or a malformed vector): the tracks carry on, ids never repeat,
    # their embeddings come again from the next crops; the log says so.
    other = state.model_copy(update={"looks": state.looks.model_copy(update={"dim": 256})})
    moved = Tracker(TrackingConfig(), cfg)
    moved.restore(other)
    assert len(moved) == 2 and moved.looks is not None and moved.looks.tracks == {}
    assert "appearance not restored" in caplog.text and "dim 256" in caplog.text
    # Appearance off where it was on: the motion state alone.
    off = Tracker(TrackingConfig())
    off.restore(state)
    assert len(off) == 2 and off.snapshot().looks is None


def test_a_stranger_where_motion_expects_a_track_is_vetoed_when_asked() -> None:
    """A person walks out of view at frame 10 as another steps in where motion predicts
    them: motion (and appearance's cost alone) hands over the id; `veto_distance` does not."""
    people, rng = _people(2), np.random.default_rng(2)

    def ids(cfg: AppearanceConfig) -> list[int]:
        tracker = Tracker(TrackingConfig(), cfg)
        out = []
        for f in range(0, 16):
            who = np.array([0 if f < 10 else 1])
            crops = _look(people, who, rng)
            dets = FrameBoxes(
                np.array([_box(100 + 10 * f)], np.float32),
                np.full(1, 0.9, np.float32),
                np.zeros(1, np.int32),
            )
            t = tracker.update(f, dets, lambda idx, c=crops: c[idx])
            out.append(int(t.track_ids[0]))
        return out

    handed = ids(AppearanceConfig(refresh_frames=1))
    assert handed[15] == handed[0], "the scene must hand the id over without the veto"
    vetoed = ids(AppearanceConfig(refresh_frames=1, veto_distance=0.5))
    assert vetoed[9] == vetoed[0] and vetoed[10] != vetoed[0] and vetoed[15] == vetoed[10]


def test_a_track_with_no_embedding_gets_the_crop_before_a_refresh_where_people_part() -> None:
    """With one crop to spend, a track never embedded (its events would carry nothing, the
    cloud could neither link nor find it) goes before a clean crop of an embedded track
    that met someone lately."""
    from strata.edge.tracking.reid import Look, Looks

    looks = Looks(AppearanceConfig(crops_per_frame=0.5, max_crops=1))
    v = np.ones(512, np.float32) / np.sqrt(512)
    looks.tracks[1] = Look(v, 1, 9, v.copy())
    looks.met[1] = 9  # track 1 met someone on the last detected frame
    ids = np.array([1, 2], np.uint64)
    ok = np.eye(2, dtype=bool)  # each track gates its own detection only
    boxes = np.array([_box(100.0), _box(300.0)], np.float32)
    picked, _ = looks.wanted(ids, ok, ok, boxes, np.ones(2, bool), 10)
    assert picked.tolist() == [1]
    assert looks.skipped == 1
