"""The console over the real three daemons on vtest (issue 27's check): `strata device` on
data/vtest.mp4 in real time cutting its tracks' clips and uploading them to the cloud,
`strata edge` with a zone and a line on the camera and snapshots on, `strata cloud` with
the console and the daemons' /metrics to scrape; Debian's chromium, headless, reads the
console while the camera plays.

Events appear live with their thumbnails (the images load), a filter narrows the list, the
detail page draws the path over the frame and plays the track's clip from the crossing's
moment (the <video> has its current frame, a duration, and starts at the crossing's capture
time minus the clip's first frame's, as GetClip tells it), the cameras page shows the
camera running with its frame rates and its cascade target, the counts page charts the
crossings, and the browser console has no errors. Screenshots of every page go to the
test's folder (and STRATA_SCREENSHOTS=DIR)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import grpc
import pytest
from browser_testkit import chromium, console_errors, images_loaded, screenshot, wait_for
from strata.shared.contracts import analytics_pb2_grpc, clips_pb2, current_version
from strata.shared.loopback import free_port
from strata.tools.demo.stack import Camera, Stack

pytestmark = [pytest.mark.slow, pytest.mark.timeout(150)]

CAMERA = "vtest"
# vtest is 768x576; people walk left and right along the path (tools/bench/rules.py).
RULES = {
    "frame_size": [768, 576],
    "zones": [{"name": "plaza", "points": [[430, 259], [768, 259], [768, 490], [430, 432]]}],
    "lines": [{"name": "west", "points": [[253, 173], [253, 547]], "in_side": "left"}],
}
LIVE_S = 60.0  # the first crossing comes about 10 s into vtest
CLIP_S = 30.0  # the crossing's clip has the crossing's fragment uploaded (GOP 1 s)
RELOAD_S = 3.0  # the page reloads for a clip that has grown since
# The player's currentTime against the expected start: the media fragment's millisecond.
SEEK_TOLERANCE_S = 0.01


@pytest.fixture
def stack(tmp_path: Path, vtest_mp4: Path) -> Iterator[Stack]:
    """Cloud (console on) and edge started; the device is the test's to start."""
    workdir = tmp_path / "run"
    s = Stack(workdir, [Camera(CAMERA, str(vtest_mp4))])
    s.extra_config = {
        "device": {
            # Looped: the camera stays `running` however slow the machine (80 s a pass).
            "source": {"realtime": True, "loop": True},
            # Each track's clip, cut on the device and uploaded straight to the cloud.
            "clips": {
                "enabled": True,
                "dir": str(workdir / "clips"),
                "pre_roll_s": 1.0,
                "post_roll_s": 1.0,
                "ring_s": 8.0,
                "upload": {"target": s.cloud_address, "poll_s": 0.2},
            },
        },
        "edge": {"snapshots": {"enabled": True}},
        "cloud": {
            "http": {
                "enabled": True,
                "listen": f"127.0.0.1:{free_port()}",
                "scrape": [s.metrics_url("device"), s.metrics_url("edge")],
            }
        },
        "rules": {"cameras": {CAMERA: RULES}},
    }
    try:
        s.start_servers()
        yield s
    finally:
        s.stop()


def console_url(stack: Stack) -> str:
    return "http://" + str(stack.config()["cloud"]["http"]["listen"])


def by_css(driver: Any, css: str) -> list[Any]:
    from selenium.webdriver.common.by import By

    return list(driver.find_elements(By.CSS_SELECTOR, css))


def types_shown(driver: Any) -> list[str]:
    return [str(td.text) for td in by_css(driver, "#events tbody tr td.type")]


def live_events(driver: Any, stack: Stack) -> list[str]:
    """Wait, the page open since before the device started, for rows that arrive live:
    a crossing, a zone entry and a classified crop among them."""

    def enough() -> list[str] | None:
        stack.check()
        shown = types_shown(driver)
        return shown if {"line_crossed", "zone_entered", "crop"} <= set(shown) else None

    shown: list[str] = wait_for("live rows of each kind", enough, LIVE_S)
    assert by_css(driver, "#live-status")[0].text == "live"
    return shown


def check_events(driver: Any, base: str, stack: Stack, out: Path) -> None:
    driver.get(base + "/")
    assert by_css(driver, "#empty"), "the store is empty before the device starts"
    wait_for("the live stream", lambda: by_css(driver, "#live-status")[0].text == "live")
    stack.start_device()
    shown = live_events(driver, stack)
    assert len(set(shown)) >= 3, shown
    imgs = by_css(driver, "#events tbody tr td.thumb img")
    assert len(imgs) >= len(shown) // 2, "most rows have their snapshot"
    wait_for("thumbnails to load", lambda: images_loaded(driver, imgs))
    screenshot(driver, out, "events")

    from selenium.webdriver.support.ui import Select

    Select(by_css(driver, '#filters select[name="type"]')[0]).select_by_value("line_crossed")
    by_css(driver, '#filters button[type="submit"]')[0].click()
    wait_for("the filtered list", lambda: "type=line_crossed" in driver.current_url)
    narrowed = wait_for("crossings", lambda: types_shown(driver))
    assert set(narrowed) == {"line_crossed"}, narrowed
    assert all("line west" in td.text for td in by_css(driver, "#events td.rules"))
    first = by_css(driver, "#events tbody tr td.thumb img")[:5]
    wait_for("the filtered thumbnails", lambda: images_loaded(driver, first))
    screenshot(driver, out, "events-filtered")


def check_detail(driver: Any, out: Path) -> None:
    by_css(driver, "#events tbody tr a")[0].click()  # the newest crossing
    path = wait_for("the path", lambda: by_css(driver, "#drawing #path"))[0]
    assert len(path.get_attribute("points").split()) >= 2
    assert [z.text for z in by_css(driver, "#drawing polygon.zone title")] == ["zone plaza"]
    assert [ln.text for ln in by_css(driver, "#drawing polyline.line title")] == ["line west"]
    href = by_css(driver, "#drawing image")[0].get_attribute("href")
    assert "kind=frame" in href
    width = driver.execute_async_script(
        "const done = arguments[1], i = new Image();"
        "i.onload = () => done(i.naturalWidth); i.onerror = () => done(0);"
        "i.src = arguments[0];",
        href,
    )
    assert width > 0, "the frame snapshot loads"
    svg = by_css(driver, "#drawing")[0]
    size = (svg.get_attribute("width"), svg.get_attribute("height"))
    assert size == ("768", "576"), "drawn in vtest's own pixels"
    screenshot(driver, out, "track")


def clip_info(stack: Stack, uid: str) -> clips_pb2.ClipInfo:
    """The track's clip as the cloud's GetClip describes it."""
    req = clips_pb2.GetClipRequest(version=current_version(), camera_id=CAMERA, track_uid=uid)
    with grpc.insecure_channel(stack.cloud_address) as channel:
        stub = analytics_pb2_grpc.AnalyticsStub(channel)  # type: ignore[no-untyped-call]
        for reply in stub.GetClip(req, timeout=10):
            if reply.HasField("info"):
                return reply.info
    raise AssertionError(f"GetClip gave no info for {uid}")


def clip_offset(info: clips_pb2.ClipInfo, at_ns: int) -> float:
    """Seconds into the clip of the event: its capture time minus the clip's first frame's,
    at most the clip's span once it is final."""
    expected = max(0.0, (at_ns - info.start_ns) / 1e9)
    if info.final:
        expected = min(expected, (info.end_ns - info.start_ns) / 1e9)
    return expected


def playing(driver: Any, stack: Stack, uid: str, at_ns: int) -> dict[str, Any]:
    """The detail page's <video> once it has its current frame (readyState >= 2) and has
    settled where it starts (data-started), the page reloaded while the clip has no bytes
    yet or, still open, has not reached the event's moment."""
    script = (
        "const v = arguments[0];"
        "return {ready: v.readyState, duration: v.duration, at: v.currentTime,"
        " width: v.videoWidth, started: v.dataset.started === '1'};"
    )
    deadline = time.monotonic() + CLIP_S
    loaded = time.monotonic()
    while True:
        stack.check()
        video = by_css(driver, "video#clip")
        if video:
            got: dict[str, Any] = driver.execute_script(script, video[0])
            if got["ready"] >= 2 and got["started"]:
                info = clip_info(stack, uid)
                if info.final or got["duration"] >= clip_offset(info, at_ns):
                    return got
        assert time.monotonic() < deadline, f"the clip did not play: {got if video else 'none'}"
        time.sleep(0.2)
        if time.monotonic() - loaded > RELOAD_S:
            driver.refresh()
            loaded = time.monotonic()


def check_clip(driver: Any, stack: Stack, out: Path) -> None:
    """The crossing's detail page plays its track's clip from the crossing's moment and
    says the clip's state."""
    q = parse_qs(urlsplit(driver.current_url).query)
    uid, at_ns = q["uid"][0], int(q["at"][0])
    got = playing(driver, stack, uid, at_ns)
    assert got["duration"] > 0 and got["width"] == 768, got
    info = clip_info(stack, uid)
    assert info.start_ns, info
    expected = clip_offset(info, at_ns)
    assert abs(got["at"] - expected) <= SEEK_TOLERANCE_S, (got, expected)
    assert expected > 0, "the clip starts before the crossing (pre-roll)"
    state = by_css(driver, "#clip-state")[0]
    words = state.find_element("css selector", ".words").text
    if state.get_attribute("data-state") == "uploading":
        assert words.startswith("still uploading"), words
    else:
        assert state.get_attribute("data-state") == "complete", words
    screenshot(driver, out, "clip")


def rate(driver: Any, column: int) -> float:
    text = by_css(driver, f"#cameras tr.camera td:nth-child({column})")[0].text
    return float(text) if text else 0.0


def check_cameras(driver: Any, base: str, out: Path) -> None:
    driver.get(base + "/cameras")
    cams = by_css(driver, "#cameras tr.camera")
    assert [c.get_attribute("data-camera") for c in cams] == [CAMERA]
    assert by_css(driver, "#cameras td.state")[0].text == "running"
    time.sleep(1.0)
    driver.get(base + "/cameras")  # rates come from two scrapes
    assert rate(driver, 4) > 0, "decoded frames per second"
    # The device's cascade target, from the agent daemon's /metrics (no site gate: empty).
    cascade = by_css(driver, "#cameras td.cascade")[0]
    assert cascade.get_attribute("data-verdict") in ("waiting", "held", "recovering", "missed")
    assert "target 0.900" in cascade.text, cascade.text
    assert by_css(driver, "#cameras td.site-gate")[0].text == ""
    thumb = by_css(driver, "#cameras td.thumb img")
    wait_for("the latest snapshot", lambda: images_loaded(driver, thumb))
    screenshot(driver, out, "cameras")


def check_counts(driver: Any, base: str, out: Path) -> None:
    driver.get(base + "/counts?period=hour")  # per minute: the run is in the last ones
    rows = by_css(driver, "#counts tbody tr")
    lines = [r for r in rows if "west" in r.text]
    assert lines, [r.text for r in rows]
    totals = [int(r.find_element("css selector", "td.total").text) for r in lines]
    assert sum(totals) > 0
    assert by_css(driver, "#counts svg.chart rect.bar")
    screenshot(driver, out, "counts")


def check_editor(driver: Any, base: str, out: Path) -> None:
    """The editor on vtest's latest frame: the configured zone and line restated in pixels."""
    import yaml
    from strata.shared.config.base import validate_model
    from strata.shared.config.rules import CameraRules, RulesConfig

    driver.get(base + "/cameras")
    by_css(driver, "#cameras a.edit-rules")[0].click()
    wait_for("the editor", lambda: by_css(driver, "#editor image"))
    text = by_css(driver, "#yaml")[0].get_attribute("value")
    rules = validate_model(RulesConfig, yaml.safe_load(text)["rules"]).cameras[CAMERA]
    assert rules == validate_model(CameraRules, RULES), "configured in vtest's pixels already"
    screenshot(driver, out, "editor")


def test_console_over_the_three_daemons_on_vtest(stack: Stack, tmp_path: Path) -> None:
    base = console_url(stack)
    started = time.monotonic()
    with chromium(tmp_path) as driver:
        check_events(driver, base, stack, tmp_path)
        check_detail(driver, tmp_path)
        check_clip(driver, stack, tmp_path)
        check_cameras(driver, base, tmp_path)
        check_counts(driver, base, tmp_path)
        check_editor(driver, base, tmp_path)
        stack.check()
        assert console_errors(driver) == []
    for name in ("events", "events-filtered", "track", "clip", "cameras", "counts", "editor"):
        assert (tmp_path / f"{name}.png").stat().st_size > 1000
    print(f"console screenshots in {tmp_path} after {time.monotonic() - started:.0f} s")
