from pathlib import Path
from typing import Any

import av
import cv2
import numpy as np
import pytest
from strata.device.capture.frames import Frame
from strata.device.filters.motion import MotionGate
from strata.shared.config.device import IgnoreRect, MotionConfig
from strata.shared.synthetic import SyntheticClip

from .clip_media import write_clip


def _scene(h: int = 144, w: int = 192) -> np.ndarray:
    rng = np.random.default_rng(0)
    return rng.integers(60, 120, size=(h, w, 3), dtype=np.uint8)


def _with_box(img: np.ndarray, x: int, y: int, size: int = 30) -> np.ndarray:
    out = img.copy()
    out[y : y + size, x : x + size] = 255
    return out


def test_first_frame_is_kept_and_identical_frames_dropped() -> None:
    gate = MotionGate(MotionConfig(threshold=2.0, max_interval_s=0))
    scene = _scene()
    assert gate.check(scene, 0.0).why == "first"
    for i in range(1, 10):
        d = gate.check(scene, i / 10)
        assert not d.keep and d.score == pytest.approx(0.0)


def test_a_moving_object_is_kept() -> None:
    gate = MotionGate(MotionConfig(threshold=2.0, max_interval_s=0))
    scene = _scene()
    gate.check(scene, 0.0)
    d = gate.check(_with_box(scene, 50, 50), 0.1)
    assert d.keep and d.why == "motion" and d.score > 2.0


def test_score_is_against_the_last_kept_frame_so_slow_drift_adds_up() -> None:
    gate = MotionGate(MotionConfig(threshold=6.0, max_interval_s=0))
    base = _scene().astype(np.int16)
    gate.check(base.astype(np.uint8), 0.0)
    kept_at = None
    for step in range(1, 30):
        # Each frame is only 1 grey level brighter than the previous one.
        d = gate.check(np.clip(base + step, 0, 255).astype(np.uint8), step / 10)
        if step < 6:
            assert not d.keep, "a 1-level step must not pass a threshold of 6"
        if d.keep:
            kept_at = step
            break
    # Against the PREVIOUS frame the score would stay at 1 forever.
    assert kept_at == 6


def test_max_interval_keeps_a_still_scene_reporting() -> None:
    gate = MotionGate(MotionConfig(threshold=2.0, max_interval_s=1.0))
    scene = _scene()
    kept = [gate.check(scene, i / 10).keep for i in range(35)]
    assert [i for i, k in enumerate(kept) if k] == [0, 10, 20, 30]


def test_ignored_region_does_not_count() -> None:
    cfg = MotionConfig(
        threshold=2.0, max_interval_s=0, ignore=[IgnoreRect(x1=0.0, y1=0.0, x2=0.5, y2=0.5)]
    )
    gate = MotionGate(cfg)
    scene = _scene()
    gate.check(scene, 0.0)
    assert not gate.check(_with_box(scene, 10, 10), 0.1).keep  # inside the ignored quarter
    assert gate.check(_with_box(scene, 140, 100), 0.2).keep  # outside it


def test_grey_and_bgr_inputs_agree_and_any_size_works() -> None:
    import cv2

    big = cv2.resize(_scene(), (768, 576), interpolation=cv2.INTER_NEAREST)
    moved = _with_box(big, 300, 200, 120)
    a, b = MotionGate(MotionConfig()), MotionGate(MotionConfig())
    a.check(big, 0.0)
    b.check(cv2.cvtColor(big, cv2.COLOR_BGR2GRAY), 0.0)
    sa = a.check(moved, 0.1).score
    # A strided grey view (like a decoder's luma plane with padding) works in place.
    padded = np.zeros((576, 800), np.uint8)
    padded[:, :768] = cv2.cvtColor(moved, cv2.COLOR_BGR2GRAY)
    sb = b.check(padded[:, :768], 0.1).score
    assert sa == pytest.approx(sb, rel=0.05)


def test_buffers_are_reused() -> None:
    gate = MotionGate(MotionConfig(threshold=1.0))
    scene = _scene()
    gate.check(scene, 0.0)
    buffers = {id(gate._grey), id(gate._kept)}
    for i in range(1, 6):
        gate.check(_with_box(scene, 10 * i, 10), i / 10)
    assert {id(gate._grey), id(gate._kept)} == buffers


def test_decoded_frames_score_from_their_luma_as_before(vtest_mp4: Path) -> None:
    """FFmpeg's area scaling of the luma plane (no BGR) scores like cv2's INTER_AREA on the
    full-size luma plane did: same decisions, scores within 0.05."""
    import av
    from strata.device.capture.frames import Frame

    cfg = MotionConfig(threshold=6.0, max_interval_s=0)
    fast, full = MotionGate(cfg), MotionGate(cfg)
    with av.open(str(vtest_mp4)) as container:
        for i, decoded in enumerate(container.decode(video=0)):
            if i == 80:
                break
            frame = Frame(i, i / 10, 0, av_frame=decoded)
            a = fast.check(fast.score_input(frame), frame.ts)
            b = full.check(frame.motion_input(), frame.ts)
            assert a.keep == b.keep
            assert a.score == pytest.approx(b.score, abs=0.05)
            assert frame.decoded  # scoring converted nothing to BGR


def _cut_clip(frames: int = 20) -> list[np.ndarray]:
    """Two synthetic scenes (different seeds) back to back: a cut at `frames`."""
    a = SyntheticClip(width=320, height=240, frames=frames, objects=4, seed=1)
    b = SyntheticClip(width=320, height=240, frames=frames, objects=4, seed=2)
    return [f.image for f in a] + [f.image for f in b]


def test_a_cut_is_a_scene_change_exactly_at_the_cut() -> None:
    gate = MotionGate(MotionConfig(threshold=4.0, max_interval_s=0))
    decisions = [gate.check(img, i / 10) for i, img in enumerate(_cut_clip())]
    scenes = [i for i, d in enumerate(decisions) if d.scene_change]
    assert scenes == [20]
    assert decisions[20].keep and decisions[20].why == "scene_change"


def test_moving_objects_and_light_are_not_scene_changes() -> None:
    gate = MotionGate(MotionConfig(threshold=2.0, max_interval_s=0))
    clip = SyntheticClip(width=320, height=240, frames=60, objects=6, seed=3)
    decisions = [gate.check(f.image, f.index / 10) for f in clip]
    assert sum(d.keep and d.why == "motion" for d in decisions) > 5  # it does move
    assert not any(d.scene_change for d in decisions)
    base = _scene().astype(np.int16)
    gate = MotionGate(MotionConfig(threshold=2.0, max_interval_s=0))
    lit = [gate.check(np.clip(base + s, 0, 255).astype(np.uint8), s) for s in range(0, 20, 4)]
    assert not any(d.scene_change for d in lit)


def test_a_pan_is_a_scene_change_even_under_a_raised_threshold() -> None:
    clip = SyntheticClip(width=320, height=240, frames=1, objects=0, seed=4)
    wide = np.concatenate([clip.background, clip.background[:, ::-1]], axis=1)
    gate = MotionGate(MotionConfig(threshold=4.0, max_interval_s=0))
    gate.check(wide[:, :320], 0.0)
    d = gate.check(wide[:, 40:360], 0.1, threshold=1000.0)
    assert d.keep and d.scene_change


def test_scene_change_off_and_forced_keeps_still_flag_it() -> None:
    a, b = _cut_clip(2)[1], _cut_clip(2)[2]
    off = MotionGate(MotionConfig(threshold=4.0, max_interval_s=0, scene_change=0))
    off.check(a, 0.0)
    assert off.check(b, 0.1).why == "motion"
    gate = MotionGate(MotionConfig(threshold=4.0, max_interval_s=0))
    gate.check(a, 0.0)
    d = gate.keep_now(b, 0.1, "calibration")
    assert d.why == "calibration" and d.scene_change


def test_a_cut_while_the_cascade_waits_is_kept_on_its_frame() -> None:
    """`cut` (the cascade's min_gap not yet passed) keeps a cut and nothing else: ordinary
    motion waits, and the last kept frame stays the reference."""
    frames = _cut_clip()
    gate = MotionGate(MotionConfig(threshold=2.0, max_interval_s=0))
    assert gate.check(frames[0], 0.0).keep
    waited = [gate.cut(img, i / 10) for i, img in enumerate(frames[1:], start=1)]
    assert [i for i, d in enumerate(waited, start=1) if d is not None] == [20]
    d = waited[19]
    assert d is not None and d.keep and d.scene_change and d.why == "scene_change"
    # The cut is the reference now: the same frame again is no change.
    assert gate.check(frames[20], 2.1).keep is False


def test_the_picture_s_shift_is_measured_on_a_pan_and_not_on_objects() -> None:
    clip = SyntheticClip(width=320, height=240, frames=30, objects=6, seed=5)
    wide = np.concatenate([clip.background, clip.background[:, ::-1]], axis=1)
    gate = MotionGate(MotionConfig(threshold=0.5, max_interval_s=0, scene_change=0))
    gate.check(wide[:, :320], 0.0)
    # 12 source pixels to the right: 7.2 of the gate's 192.
    d = gate.keep_now(wide[:, 12:332], 0.1, "pan")
    assert d.shift is not None and d.shift == pytest.approx(12 * 192 / 320, abs=0.5)
    still = MotionGate(MotionConfig(threshold=0.5, max_interval_s=0, scene_change=0))
    shifts = [still.keep_now(f.image, f.index / 10, "motion").shift for f in clip]
    assert shifts[0] is None  # nothing to compare the first with
    assert max(s for s in shifts[1:] if s is not None) < 0.5
    # Across a cut the two frames share no translation.
    cut = MotionGate(MotionConfig(threshold=0.5, max_interval_s=0))
    a, b = _cut_clip(2)[1], _cut_clip(2)[2]
    cut.check(a, 0.0)
    assert cut.check(b, 0.1).shift is None


def test_a_pan_that_starts_while_the_cascade_waits_is_followed_from_its_first_pixels() -> None:
    clip = SyntheticClip(width=320, height=240, frames=1, objects=0, seed=4)
    wide = np.concatenate([clip.background, clip.background[:, ::-1]], axis=1)
    gate = MotionGate(MotionConfig(threshold=1.0, max_interval_s=0, scene_change=0.95))
    gate.check(wide[:, :320], 0.0)
    # 2 source pixels a frame: 1.2 of the gate's; kept once it moved PAN_SHIFT (4) of them.
    waited = [gate.cut(wide[:, x : x + 320], x / 20) for x in range(2, 30, 2)]
    kept = [2 * (i + 1) for i, d in enumerate(waited) if d is not None]
    assert kept and kept[0] == 8, kept
    d = waited[3]
    assert d is not None and d.why == "pan" and not d.scene_change
    assert d.shift == pytest.approx(8 * 0.6, abs=0.5)
    # Measured from the kept frame on: the next is kept 8 pixels later.
    assert kept[:2] == [8, 16]


def test_a_burst_frame_is_unchanged_against_the_last_one_the_gate_alone_would_keep() -> None:
    # Every burst frame is kept (keep_now); each is also scored against the last burst
    # frame the gate alone would have kept, so slow drift adds up as it does outside bursts.
    gate = MotionGate(MotionConfig(threshold=6.0, max_interval_s=0))
    base = _scene().astype(np.int16)
    unchanged = []
    for step in range(0, 10):
        gate.keep_now(np.clip(base + step, 0, 255).astype(np.uint8), step / 10, "calibration")
        unchanged.append(gate.burst_unchanged(start=step == 0))
    # Frame 6 differs from frame 0 by 6 levels: the gate would have kept it.
    assert unchanged == [False] + [True] * 5 + [False] + [True] * 3
    # A new burst starts from its own first frame.
    gate.keep_now(_with_box(_scene(), 50, 50), 2.0, "calibration")
    assert not gate.burst_unchanged(start=True)


def _held(path: Path, gap: int, cfg: MotionConfig, quiet: bool) -> tuple[list[Any], int]:
    """`path` through the gate as a camera with the cascade's `gap` drives it: the frames
    in between looked at for a cut or a pan only, through `quiet` first when asked. Each
    frame's decision (None: dropped), and how many `quiet` settled."""
    gate = MotionGate(cfg)
    out: list[Any] = []
    last, settled = -gap, 0
    with av.open(str(path)) as container:
        for i, decoded in enumerate(container.decode(video=0)):
            frame = Frame(i, i / 10, 0, av_frame=decoded)
            if i - last < gap:
                if quiet and gate.quiet(frame):
                    settled += 1
                    out.append(None)
                    continue
                d = gate.cut(gate.score_input(frame), i / 10)
            else:
                d = gate.check(gate.score_input(frame), i / 10)
            if d is not None and d.keep:
                last = i
                out.append((d.why, round(d.score, 6), d.scene_change, d.shift))
            else:
                out.append(None)
    return out, settled


@pytest.mark.parametrize("ignore", [(), (IgnoreRect(x1=0.0, y1=0.0, x2=0.6, y2=1.0),)])
def test_held_frames_found_quiet_are_those_a_cut_check_would_drop(
    tmp_path: Path, ignore: tuple[IgnoreRect, ...]
) -> None:
    # People moving over a still street, a cut to another, then a pan across a blurred one.
    a = SyntheticClip(width=320, height=240, frames=40, objects=4, seed=1)
    b = SyntheticClip(width=320, height=240, frames=20, objects=4, seed=2)
    street = SyntheticClip(width=320, height=240, frames=1, objects=0, seed=4).background
    wide = cv2.GaussianBlur(np.concatenate([street, street[:, ::-1]], axis=1), (0, 0), 3)
    pan = [np.ascontiguousarray(wide[:, 3 * k : 3 * k + 320]) for k in range(40)]
    clip = write_clip(tmp_path / "held.mp4", [f.image for f in a] + [f.image for f in b] + pan)
    cfg = MotionConfig(ignore=list(ignore))
    every, _ = _held(clip, 6, cfg, quiet=False)
    found, settled = _held(clip, 6, cfg, quiet=True)
    # The same frames kept, for the same reasons, scores and shifts.
    assert found == every
    whys = [d[0] for d in every if d is not None]
    assert every[40] is not None and every[40][2], whys  # the cut, on its frame
    assert whys.count("pan") >= 3, whys
    # The still street's held frames never needed the full grey.
    held = sum(1 for i in range(40) if i % 6)
    assert settled >= 0.8 * held, (settled, held)


def test_quiet_needs_a_decoded_frame_to_compare_with() -> None:
    # Arrays (no luma plane): nothing coarse was kept, so `cut` must look.
    gate = MotionGate(MotionConfig())
    scene = _scene()
    gate.check(scene, 0.0)
    assert not gate.quiet(Frame(1, 0.1, 0, bgr=scene))
