"""The console in a real browser: Debian's chromium, headless, driven by Selenium through
chromium-driver, against a real `strata cloud` server (CloudServer with cloud.http on).

Events appear live, thumbnails load, a filter narrows the list, the detail page draws the
path, a track's event clip (a real fMP4 from vtest.mp4, uploaded through UploadClip) plays
in its <video> from the event's moment, the cameras page lists the camera, the counts page
counts the crossing, and the browser console has no errors. The events are dated minutes
before the test (so the counts' week holds them). Screenshots of each page go to the test's
tmp folder."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit, urlunsplit

import pytest
from browser_testkit import chromium, wait_for
from clip_helpers import chunks, info, make_clip
from cloud_helpers import make_config, stub_for, track_event
from console_helpers import RULES, crop, put_snapshot
from strata.cloud.server import CloudServer
from strata.shared.config.base import validate_model
from strata.shared.config.rules import RulesConfig
from strata.shared.contracts import events_pb2


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    with chromium(tmp_path) as driver:
        yield driver


def rows(driver: Any) -> list[Any]:
    from selenium.webdriver.common.by import By

    return list(driver.find_elements(By.CSS_SELECTOR, "#events tbody tr"))


MS = 1_000_000
# The seeded door track first seen two minutes before the test, its events milliseconds
# apart after that.
T0 = time.time_ns() - 120_000 * MS
DOOR = (T0, 7)
DOOR_UID = f"{T0}-7"


def seed(server: CloudServer, db: Path) -> None:
    """Two cameras' crops, a door track that crosses the gate, and its snapshots."""
    store = server.store
    store.submit_track(track_event(1, track=DOOR, kind="new", capture_ns=T0 + MS)).result(10)
    store.submit(crop(1, "door", t=T0 + 1_500_000, track_id=7)).result(10)
    crossing = track_event(
        2,
        track=DOOR,
        capture_ns=T0 + 2 * MS,
        kind="line_crossed",
        line="gate",
        rule="gate-count",
        direction=events_pb2.CROSSING_DIRECTION_IN,
    )
    del crossing.path.points[:]
    for i in range(8):  # walking down across the gate line
        crossing.path.points.add(x=0.3 + 0.02 * i, y=0.4 + 0.06 * i, observed=i % 3 != 2)
    crossing.after.box.x1, crossing.after.box.y1 = 150, 250
    crossing.after.box.x2, crossing.after.box.y2 = 290, 420
    store.submit_track(crossing).result(10)
    store.submit(crop(2, "yard", t=T0 + 2_500_000, label="dog")).result(10)
    put_snapshot(db, "door", DOOR_UID, 1)
    put_snapshot(db, "door", DOOR_UID, 2)


def upload_clip(server: CloudServer, uid: str, start_ns: int) -> None:
    """A 2 s cut of vtest.mp4 (CLIP_S shown) in fMP4 for the door track `uid` whose first
    frame was captured at `start_ns`, through the real UploadClip rpc."""
    channel, stub = stub_for(server)
    clip = info(tracks=(uid,), start_ns=start_ns)
    with channel:
        acks = list(
            stub.UploadClip(iter(chunks(make_clip(2.0), 64 * 1024, clip, int(CLIP_S * 1e9))))
        )
    assert acks[-1].complete


@dataclass(frozen=True)
class Opened:
    """An event of the list to open: its row's data-id, its track and capture time."""

    row: str
    track_uid: str
    capture_ns: int


SEEK_S = 1.2  # the event's capture, seconds into its clip
# The uploaded clip's span (end_ns - start_ns): its last frame is shown at 2.2 s, vtest's
# B-frames putting it after the 2 s cut.
CLIP_S = 2.2
SEEK_TOLERANCE_S = 0.01  # the media fragment's millisecond, and a frame's decode


def clip_plays(browser: Any, server: CloudServer, event: Any, tmp_path: Path) -> None:
    """An event with a clip plays it from the event's moment: opened from the event's row,
    the <video> gets to its current frame at least, at the event's capture time minus the
    clip's start, and the page says the clip is complete."""
    from selenium.webdriver.common.by import By

    upload_clip(server, event.track_uid, event.capture_ns - int(SEEK_S * 1e9))
    browser.find_element(By.CSS_SELECTOR, f'#events tr[data-id="{event.row}"] a').click()
    video = wait_for("the player", lambda: browser.find_elements(By.CSS_SELECTOR, "video#clip"))[0]
    at = started_at(browser)
    assert browser.execute_script("return arguments[0].videoWidth", video) == 768
    assert abs(at - SEEK_S) <= SEEK_TOLERANCE_S, f"the player starts at {at} s, not at the event"
    state = browser.find_element(By.ID, "clip-state")
    assert state.get_attribute("data-state") == "complete"
    assert state.find_element(By.CLASS_NAME, "words").text == "complete"
    selected = browser.find_elements(By.CSS_SELECTOR, "#track-events tr.selected td.type")
    assert [td.text for td in selected] == ["new"], "the event's own row is marked"
    browser.save_screenshot(str(tmp_path / "clip.png"))
    # An event after the clip's last frame starts the player at the clip's end (its span,
    # CLIP_S), not a frame before it where a bare media fragment lands in chromium.
    url = urlsplit(browser.current_url)
    query = parse_qs(url.query)
    query["at"] = [str(event.capture_ns - int(SEEK_S * 1e9) + int(10e9))]
    browser.get(urlunsplit(url._replace(query=urlencode(query, doseq=True))))
    at = started_at(browser)
    assert abs(at - CLIP_S) <= SEEK_TOLERANCE_S, f"the player starts at {at} s, not the end"


def started_at(browser: Any) -> float:
    """currentTime of the detail page's player once it has its frame and has settled."""
    from selenium.webdriver.common.by import By

    video = wait_for("the player", lambda: browser.find_elements(By.CSS_SELECTOR, "video#clip"))[0]
    wait_for(
        "the clip to load and start",
        lambda: browser.execute_script(
            "const v = arguments[0]; return v.readyState >= 2 && v.dataset.started === '1'", video
        ),
    )
    return float(browser.execute_script("return arguments[0].currentTime", video))


def counts_show_the_crossing(browser: Any, base: str, tmp_path: Path) -> None:
    """The week's counts hold the seeded crossing of the gate, charted."""
    from selenium.webdriver.common.by import By

    browser.get(base + "/counts?period=week")
    assert browser.find_element(By.ID, "counts")
    counted = browser.find_elements(By.CSS_SELECTOR, "#counts tbody tr")
    gate = [r for r in counted if "gate" in r.text]
    assert [r.find_element(By.CLASS_NAME, "total").text for r in gate] == ["1"], [
        r.text for r in counted
    ]
    assert browser.find_elements(By.CSS_SELECTOR, "#counts svg.chart rect.bar")
    browser.save_screenshot(str(tmp_path / "counts.png"))


def test_console_in_chromium(
    browser: Any,
    tmp_path: Path,
    colour_model: tuple[Path, Path],
    start_server: Callable[..., CloudServer],
) -> None:
    from selenium.webdriver.common.by import By

    model, labels = colour_model
    db = tmp_path / "events.sqlite"
    cfg = make_config(model, db, labels, http={"enabled": True, "listen": "127.0.0.1:0"})
    server = CloudServer(cfg, rules=validate_model(RulesConfig, RULES))
    server.start()
    try:
        assert server.console is not None
        base = server.console.url
        store = server.store
        seed(server, db)

        browser.get(base + "/")
        wait_for("the first page", lambda: len(rows(browser)) == 4)
        wait_for(
            "the live stream", lambda: browser.find_element(By.ID, "live-status").text == "live"
        )
        # Live: stored after the page loaded, it appears without a reload.
        fresh_ev = track_event(
            3, track=(T0 + 5_000 * MS, 9), kind="new", label="bicycle", capture_ns=T0 + 9_000 * MS
        )
        fresh = store.submit_track(fresh_ev).result(10)
        row_id = f"track-{fresh.stored.stored_id}"
        wait_for(
            "the live event",
            lambda: browser.find_elements(By.CSS_SELECTOR, f'#events tr[data-id="{row_id}"]'),
        )
        assert rows(browser)[0].get_attribute("data-id") == row_id
        assert "bicycle" in rows(browser)[0].text
        imgs = browser.find_elements(By.CSS_SELECTOR, "#events img")
        assert imgs, "the door track's rows show its snapshot"
        wait_for(
            "thumbnails to load",
            lambda: all(
                browser.execute_script(
                    "return arguments[0].complete && arguments[0].naturalWidth", i
                )
                for i in imgs
            ),
        )
        browser.save_screenshot(str(tmp_path / "events.png"))

        # A filter narrows the list.
        box = browser.find_element(By.CSS_SELECTOR, '#filters input[name="camera"]')
        box.send_keys("yard")
        browser.find_element(By.CSS_SELECTOR, '#filters button[type="submit"]').click()
        wait_for("the filtered list", lambda: "camera=yard" in browser.current_url)
        cams = [r.find_element(By.CLASS_NAME, "camera").text for r in rows(browser)]
        assert cams == ["yard"]
        browser.save_screenshot(str(tmp_path / "events-filtered.png"))

        # The detail page draws the path over the snapshot, with the rules' geometry.
        browser.get(base + "/?camera=door&type=line_crossed")
        wait_for("the line crossing", lambda: len(rows(browser)) == 1)
        rows(browser)[0].find_element(By.LINK_TEXT, "detail").click()
        path = wait_for("the path", lambda: browser.find_elements(By.ID, "path"))[0]
        assert len(path.get_attribute("points").split()) == 8
        assert browser.find_elements(By.CSS_SELECTOR, "#drawing rect.box")
        assert browser.find_elements(By.CSS_SELECTOR, "#drawing polygon.zone")
        assert browser.find_elements(By.CSS_SELECTOR, "#drawing polyline.line")
        assert browser.find_element(By.ID, "clip").text == "no clip"
        bg = browser.find_element(By.CSS_SELECTOR, "#drawing image")
        assert "kind=frame" in bg.get_attribute("href")
        browser.save_screenshot(str(tmp_path / "track.png"))

        # The fresh event's detail page, from its row, plays its clip from its moment.
        browser.get(base + "/?camera=door")
        wait_for("the door's rows", lambda: len(rows(browser)) == 4)
        clip_plays(
            browser, server, Opened(row_id, fresh_ev.track_uid, fresh_ev.capture_ns), tmp_path
        )

        browser.get(base + "/cameras")
        cam_rows = browser.find_elements(By.CSS_SELECTOR, "#cameras tr.camera")
        assert {r.get_attribute("data-camera") for r in cam_rows} == {"door", "yard"}
        browser.save_screenshot(str(tmp_path / "cameras.png"))

        counts_show_the_crossing(browser, base, tmp_path)

        errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
        assert errors == []
        for name in ("events", "events-filtered", "track", "clip", "cameras", "counts"):
            assert (tmp_path / f"{name}.png").stat().st_size > 1000
        print(f"console screenshots in {tmp_path}")
    finally:
        server.stop()
