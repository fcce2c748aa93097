"""The rule editor (cloud/console/editor.py, static/editor.js): a camera's rules restated in
its frame's pixels, and in Debian's chromium a zone and a line drawn by clicking on the
snapshot give YAML that the real config model (shared/config/rules.py) accepts as it is."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from browser_testkit import chromium, console_errors, screenshot, wait_for
from cloud_helpers import make_config, track_event
from console_helpers import RULES, put_snapshot
from strata.cloud.console.editor import editor, in_pixels
from strata.cloud.console.views import rule_shapes
from strata.cloud.server import CloudServer
from strata.shared.config.base import validate_model
from strata.shared.config.rules import CameraRules, RulesConfig

DOOR = {
    **RULES["cameras"]["door"],
    "dwell": [{"name": "linger", "zone": "porch", "seconds": 4}],
}
DOOR["zones"] = [{**DOOR["zones"][0], "labels": ["person"], "min_area": 0.01}]


def test_rules_restated_in_pixels_keep_their_geometry_and_options() -> None:
    rules = validate_model(CameraRules, DOOR)
    data = in_pixels(rules, (640, 480))
    again = validate_model(CameraRules, data)
    assert again.frame_size == (640, 480)
    assert rule_shapes(again, 640, 480) == rule_shapes(rules, 640, 480)
    assert again.zones[0].points == [(64, 240), (384, 240), (384, 456), (64, 456)]
    assert again.zones[0].min_area == pytest.approx(0.01 * 640 * 480)
    assert again.zones[0].labels == ["person"] and again.dwell == rules.dwell
    # From one frame_size to another: scaled, not re-read as relative.
    halved = in_pixels(again, (320, 240))
    assert validate_model(CameraRules, halved).lines[0].points == [(0, 168), (320, 168)]
    assert in_pixels(None, (800, 600)) == {"frame_size": [800, 600]}


def test_the_editor_takes_the_frame_size_from_the_camera_s_events() -> None:
    rules = validate_model(CameraRules, DOOR)
    ev = track_event(1)
    ev.frame_width, ev.frame_height = 768, 576
    ed = editor("door", ev, rules, "/api/snapshot?x")
    assert (ed.width, ed.height) == (768, 576) and ed.background == "/api/snapshot?x"
    assert ed.rules["lines"] == [{"name": "gate", "points": [[0, 403.2], [768, 403.2]]}]
    assert [z.name for z in ed.zones] == ["porch"] and [ln.name for ln in ed.lines] == ["gate"]
    blank = editor("yard", None, None, "")
    assert (blank.width, blank.height) == (640, 480) and blank.rules == {"frame_size": [640, 480]}
    stated = validate_model(CameraRules, {"frame_size": [1920, 1080]})
    assert editor("gate", None, stated, "").as_json()["frame_size"] == [1920, 1080]


@pytest.fixture
def server(
    tmp_path: Path, colour_model: tuple[Path, Path], start_server: Callable[..., Any]
) -> Iterator[CloudServer]:
    model, labels = colour_model
    db = tmp_path / "events.sqlite"
    cfg = make_config(model, db, labels, http={"enabled": True, "listen": "127.0.0.1:0"})
    rules = validate_model(RulesConfig, {"cameras": {"door": DOOR}})
    srv = CloudServer(cfg, rules=rules)
    srv.start()
    try:
        srv.store.submit_track(track_event(1, kind="new")).result(10)
        put_snapshot(db, "door", "1000-7", 2)  # the full frame
        yield srv
    finally:
        srv.stop()


def base_url(server: CloudServer) -> str:
    assert server.console is not None
    return str(server.console.url)


def test_the_rules_api_answers_in_frame_pixels(server: CloudServer) -> None:
    with urllib.request.urlopen(base_url(server) + "/api/rules?camera=door", timeout=10) as r:
        body = json.loads(r.read())
    assert body["frame_size"] == [640, 480]
    assert body["snapshot"] == "/api/snapshot?camera=door&uid=1000-7&kind=frame"
    assert body["rules"]["lines"] == [{"name": "gate", "points": [[0, 336], [640, 336]]}]
    validate_model(CameraRules, body["rules"])
    with pytest.raises(urllib.error.HTTPError) as bad:
        urllib.request.urlopen(base_url(server) + "/api/rules", timeout=10)
    assert bad.value.code == 400


def click_at(driver: Any, svg: Any, x: float, y: float) -> None:
    """A click at frame pixel (x, y) of the editor (its SVG may be scaled on screen)."""
    from selenium.webdriver.common.action_chains import ActionChains

    rect = svg.rect
    sx, sy = rect["width"] / 640, rect["height"] / 480
    dx, dy = x * sx - rect["width"] / 2, y * sy - rect["height"] / 2
    ActionChains(driver).move_to_element_with_offset(svg, round(dx), round(dy)).click().perform()


def by_id(driver: Any, name: str) -> Any:
    from selenium.webdriver.common.by import By

    return driver.find_element(By.ID, name)


def produced(driver: Any) -> CameraRules:
    doc = yaml.safe_load(by_id(driver, "yaml").get_attribute("value"))
    return validate_model(RulesConfig, doc["rules"]).cameras["door"]


def draw(driver: Any, svg: Any) -> None:
    """A zone of four corners (and a click too few first), then a line named `exit`."""
    for x, y in ((100, 100), (300, 100)):
        click_at(driver, svg, x, y)
    by_id(driver, "finish").click()
    assert "at least 3" in by_id(driver, "editor-status").text
    for x, y in ((300, 300), (100, 300)):
        click_at(driver, svg, x, y)
    by_id(driver, "finish").click()
    driver.find_element("css selector", 'input[name="shape"][value="line"]').click()
    name = by_id(driver, "shape-name")
    assert name.get_attribute("value") == "line-1"
    name.clear()
    name.send_keys("porch")  # taken by the configured zone
    click_at(driver, svg, 500, 50)
    click_at(driver, svg, 500, 400)
    assert "taken" in by_id(driver, "editor-status").text
    by_id(driver, "undo").click()
    by_id(driver, "undo").click()
    name.clear()
    name.send_keys("exit")
    click_at(driver, svg, 500, 50)
    click_at(driver, svg, 500, 400)


def test_a_zone_and_a_line_drawn_in_chromium_give_valid_yaml(
    server: CloudServer, tmp_path: Path
) -> None:
    with chromium(tmp_path, size="1000,900") as driver:
        driver.get(base_url(server) + "/cameras")
        driver.find_element("css selector", "#cameras a.edit-rules").click()
        svg = wait_for("the editor", lambda: driver.find_elements("css selector", "#editor"))[0]
        assert driver.find_elements("css selector", "#editor polygon.zone.existing")
        before = produced(driver)
        assert before == validate_model(CameraRules, in_pixels(before, (640, 480)))
        draw(driver, svg)
        rules = wait_for("the line", lambda: len(produced(driver).lines) == 2 and produced(driver))
        assert rules.frame_size == (640, 480)
        assert [z.name for z in rules.zones] == ["porch", "zone-1"]
        assert [ln.name for ln in rules.lines] == ["gate", "exit"]
        drawn = rules.zones[1].points
        corners = [(100, 100), (300, 100), (300, 300), (100, 300)]
        assert all(
            abs(x - ex) <= 2 and abs(y - ey) <= 2
            for (x, y), (ex, ey) in zip(drawn, corners, strict=True)
        )
        (x1, y1), (x2, y2) = rules.lines[1].points
        assert (
            abs(x1 - 500) <= 2 and abs(y1 - 50) <= 2 and abs(x2 - 500) <= 2 and abs(y2 - 400) <= 2
        )
        # What was configured comes through unchanged (in pixels).
        assert rules.zones[0] == before.zones[0] and rules.dwell == before.dwell
        assert len(driver.find_elements("css selector", "#drawn .drawn")) == 2
        screenshot(driver, tmp_path, "editor")
        assert console_errors(driver) == []
