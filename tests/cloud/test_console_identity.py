"""Identities in the console, in a real browser (Debian's chromium, headless, through
Selenium) against a real `strata cloud` server: two cameras' tracks sent over gRPC are
linked; a track's page lists where else its identity was seen and links to the search by
example, whose page ranks the same person on the other camera first, thumbnails loaded, no
browser errors; /api/similar answers the same as JSON."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest
from browser_testkit import chromium, console_errors, images_loaded, screenshot, wait_for
from cloud_helpers import make_config, stub_for
from console_helpers import put_snapshot
from strata.cloud.server import CloudServer
from strata.shared.config.cloud import CloudConfig
from test_identity import send, two_cameras, wait_linked


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    with chromium(tmp_path) as driver:
        yield driver


def test_seen_elsewhere_and_search_by_example_in_chromium(
    browser: Any,
    tmp_path: Path,
    colour_model: tuple[Path, Path],
    start_server: Callable[[CloudConfig], CloudServer],
) -> None:
    from selenium.webdriver.common.by import By

    model, labels = colour_model
    db = tmp_path / "events.sqlite"
    cfg = make_config(
        model,
        db,
        labels,
        http={"enabled": True, "listen": "127.0.0.1:0"},
        identity={"link_every_s": 0.2, "threshold": 0.7, "window_s": 30},
    )
    server = start_server(cfg)
    assert server.console is not None
    base = server.console.url
    channel, stub = stub_for(server)
    left, right, _ = two_cameras()
    send(stub, left)
    send(stub, right)
    for ev in left[::2] + right[::2]:
        put_snapshot(db, ev.camera_id, ev.track_uid, 1)
    wait_linked(stub, 6)
    channel.close()
    me, partner = left[0], right[0]

    browser.get(base + "/track?" + urlencode({"camera": "left", "uid": me.track_uid}))
    seen = browser.find_elements(By.CSS_SELECTOR, "#seen-elsewhere tbody tr")
    assert len(seen) == 1 and "right" in seen[0].text and partner.track_uid in seen[0].text
    assert browser.find_element(By.ID, "identity").text.isdigit()
    screenshot(browser, tmp_path, "track-identity")
    browser.find_element(By.ID, "find-similar").click()
    found = wait_for(
        "the ranking", lambda: browser.find_elements(By.CSS_SELECTOR, "tr.similar-row")
    )
    assert found[0].get_attribute("data-camera") == "right"
    assert found[0].get_attribute("data-uid") == partner.track_uid
    sims = [float(r.find_element(By.CLASS_NAME, "similarity").text) for r in found]
    # Only the tracks that look alike (cloud.identity.min_similarity, 0.5): the other five
    # are strangers (cosine about 0), left out instead of ranked down to negative.
    assert len(sims) == 1 and sims[0] >= 0.5, sims
    thumbs = browser.find_elements(By.CSS_SELECTOR, "#similar img.thumb")
    wait_for("thumbnails", lambda: images_loaded(browser, thumbs))
    screenshot(browser, tmp_path, "similar")
    assert console_errors(browser) == []
    query = urlencode({"camera": "left", "uid": me.track_uid, "other": "1"})
    with urllib.request.urlopen(f"{base}/api/similar?{query}", timeout=10) as r:
        body = json.loads(r.read())
    assert body["results"][0]["track_uid"] == partner.track_uid
    assert {x["camera"] for x in body["results"]} == {"right"}
    assert all(x["similarity"] >= 0.5 for x in body["results"]) and len(body["results"]) == 1
