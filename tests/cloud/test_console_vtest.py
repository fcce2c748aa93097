"""The console over the real three daemons on vtest (issue 27's check): `strata device` on
data/vtest.mp4 in real time, `strata edge` with a zone and a line on the camera and
snapshots on, `strata cloud` with the console and the daemons' /metrics to scrape; Debian's
chromium, headless, reads the console while the clip plays.

Events appear live with their thumbnails (the images load), a filter narrows the list, the
detail page draws the path over the frame, the cameras page shows the camera running with
its frame rates, the counts page charts the crossings, and the browser console has no
errors. Screenshots of every page go to the test's folder (and STRATA_SCREENSHOTS=DIR)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from browser_testkit import chromium, console_errors, images_loaded, screenshot, wait_for
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


@pytest.fixture
def stack(tmp_path: Path, vtest_mp4: Path) -> Iterator[Stack]:
    """Cloud (console on) and edge started; the device is the test's to start."""
    s = Stack(tmp_path / "run", [Camera(CAMERA, str(vtest_mp4))])
    s.extra_config = {
        # Looped: the camera stays `running` however slow the machine (80 s a pass).
        "device": {"source": {"realtime": True, "loop": True}},
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
        check_cameras(driver, base, tmp_path)
        check_counts(driver, base, tmp_path)
        check_editor(driver, base, tmp_path)
        stack.check()
        assert console_errors(driver) == []
    for name in ("events", "events-filtered", "track", "cameras", "counts", "editor"):
        assert (tmp_path / f"{name}.png").stat().st_size > 1000
    print(f"console screenshots in {tmp_path} after {time.monotonic() - started:.0f} s")
