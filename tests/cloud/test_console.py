"""The console over a real store, SQLite and a real PostgreSQL alike, served on a real
loopback port: the list (newest first, filters, keyset pages), live events, track detail,
snapshots, cameras, counts, and hostile filter values."""

from __future__ import annotations

import http.client
import re
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import pytest
from console_helpers import (
    Running,
    crop,
    execute,
    get,
    put_crop,
    put_snapshot,
    put_track,
)
from strata.shared.contracts import events_pb2

UID = "1000-7"


def _seed(run: Running) -> None:
    """Crops on two cameras and a track with rule events on door."""
    put_track(run, 1, kind="new")
    put_crop(run, crop(1, "door", t=1_001_500, track_id=7, label="car", edge_label="person"))
    put_track(run, 2, kind="zone_entered", zone="porch", rule="porch-watch")
    put_track(
        run,
        3,
        kind="line_crossed",
        line="gate",
        rule="gate-count",
        direction=events_pb2.CROSSING_DIRECTION_IN,
    )
    put_crop(run, crop(2, "yard", t=1_002_500, label="dog"))


def test_list_merges_crops_and_track_events_newest_first(console: Running) -> None:
    _seed(console)
    r = get(console.port, "/api/events")
    assert r.status == 200
    events = r.json()["events"]
    assert [(e["kind"], e["type"]) for e in events] == [
        ("track", "line_crossed"),
        ("crop", "crop"),
        ("track", "zone_entered"),
        ("crop", "crop"),
        ("track", "new"),
    ]
    times = [e["time_ns"] for e in events]
    assert times == sorted(times, reverse=True)
    line = events[0]
    assert line["rules"] == ["gate-count", "line gate in"]
    assert line["verdict"] == "car" and line["score"] == pytest.approx(0.87)  # track's verdict
    # The event's own detail page: its track, the clip player at its capture time.
    assert line["url"] == f"/track?camera=door&uid=1000-7&at={line['time_ns']}"
    assert events[2]["zones"] == ["porch"]
    # The crop of track 7 links to its track; the yard dog has none.
    assert events[3]["track_uid"] == UID and events[1]["track_uid"] == ""
    assert events[1]["url"].startswith("/crop?id=")
    page = get(console.port, "/")
    assert page.status == 200 and "line gate in" in page.text and "no snapshot" in page.text


def test_keyset_pages_cover_everything_once(console: Running) -> None:
    for i in range(25):  # ties on time too: two rows per instant
        put_crop(console, crop(100 + i, "door", t=5_000_000 + (i // 2) * 1000))
        put_track(console, 10 + i, capture_ns=5_000_000 + (i // 2) * 1000)
    seen: list[str] = []
    cursor = ""
    for _ in range(20):
        q = {"limit": "7", **({"before": cursor} if cursor else {})}
        body = get(console.port, "/api/events?" + urlencode(q)).json()
        seen += [f"{e['kind']}-{e['id']}" for e in body["events"]]
        cursor = body["next"] or ""
        if not cursor:
            break
    assert len(seen) == 50 and len(set(seen)) == 50
    whole = [
        f"{e['kind']}-{e['id']}"
        for e in get(console.port, "/api/events?limit=100").json()["events"]
    ]
    assert seen == whole


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ({"camera": "yard"}, {("crop", "yard")}),
        ({"label": "dog"}, {("crop", "yard")}),
        ({"zone": "porch"}, {("zone_entered", "door")}),
        ({"rule": "gate-count"}, {("line_crossed", "door")}),
        ({"line": "gate"}, {("line_crossed", "door")}),
        ({"type": "new"}, {("new", "door")}),
        ({"type": "crop", "camera": "door"}, {("crop", "door")}),
        (
            {"since": "1970-01-01T00:00:00.001002", "until": "1970-01-01T00:00:00.001004"},
            {("zone_entered", "door"), ("crop", "yard"), ("line_crossed", "door")},
        ),
    ],
)
def test_filters_narrow_the_list(console: Running, query: dict[str, str], expected: Any) -> None:
    _seed(console)
    events = get(console.port, "/api/events?" + urlencode(query)).json()["events"]
    assert {(e["type"], e["camera"]) for e in events} == expected


HOSTILE = [
    "'; DROP TABLE events; --",
    "door' OR '1'='1",
    '<script>alert("x")</script>',
    '"><img src=x onerror=alert(1)>',
    "%' UNION SELECT * FROM track_events --",
]


@pytest.mark.parametrize("value", HOSTILE)
def test_hostile_filter_values_are_data(console: Running, value: str) -> None:
    _seed(console)
    for key in ("camera", "label", "zone", "rule", "line"):
        r = get(console.port, "/api/events?" + urlencode({key: value}))
        assert r.status == 200 and r.json()["events"] == []
        page = get(console.port, "/?" + urlencode({key: value}))
        assert page.status == 200
        assert value not in page.text  # only ever escaped
        assert "<script>alert" not in page.text and "<img src=x" not in page.text
    # The tables are all still there, with every row.
    counted = execute(
        console.db,
        [("SELECT COUNT(*) FROM events", ()), ("SELECT COUNT(*) FROM track_events", ())],
    )
    assert [c[0] for c in counted] == [2, 3]


def test_hostile_stored_values_are_escaped(console: Running) -> None:
    bad = '<script>alert("cam")</script>'
    put_crop(console, crop(1, bad, label='<img src=x onerror="alert(1)">'))
    put_track(console, 1, camera=bad, label="<b>x</b>", zone="<i>z</i>")
    for path in (
        "/",
        "/cameras",
        "/counts?period=week",
        "/crop?id=1",
        "/track?" + urlencode({"camera": bad, "uid": UID}),
        "/editor?" + urlencode({"camera": bad}),
    ):
        page = get(console.port, path)
        assert page.status == 200, path
        assert "<script>alert" not in page.text and "<img src=x" not in page.text, path
        assert "<b>x</b>" not in page.text and "<i>z</i>" not in page.text, path
    listed = get(console.port, "/api/events?" + urlencode({"camera": bad})).json()["events"]
    assert {e["camera"] for e in listed} == {bad}


@pytest.mark.parametrize(
    "path",
    [
        "/api/events?limit=0",
        "/api/events?limit=abc",
        "/api/events?before=bm90LWEtY3Vyc29y",
        "/api/events?since=yesterday",
        "/api/events?type=" + quote("nope'--"),
        "/api/events?camera=" + "x" * 300,
        "/api/track?camera=door&uid=" + quote("1' OR 1=1 --"),
        "/api/crop?id=1%20OR%201",
        "/api/counts?period=year",
        "/api/snapshot?camera=door&uid=1000-7&kind=video",
        "/api/rules",
        "/api/rules?camera=" + "x" * 300,
    ],
)
def test_bad_parameters_get_400(console: Running, path: str) -> None:
    r = get(console.port, path)
    assert r.status == 400, path
    assert r.json()["error"]


def _read_sse(resp: http.client.HTTPResponse, want: int, timeout: float) -> list[str]:
    """The data lines of the first `want` `event` records of an open SSE response."""
    got: list[str] = []
    kind = ""
    deadline = time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        line = resp.readline().decode().rstrip("\n")
        if line.startswith("event: "):
            kind = line[7:]
        elif line.startswith("data: ") and kind == "event":
            got.append(line[6:])
    return got


def test_new_events_stream_live(console: Running) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", console.port, timeout=10)
    conn.request("GET", "/api/events/stream?camera=door")
    resp = conn.getresponse()
    assert resp.status == 200
    assert resp.headers["content-type"].startswith("text/event-stream")
    assert resp.readline().startswith(b"retry:")
    # Subscribed before the reply started: what commits now is streamed.
    put_crop(console, crop(9, "yard"))  # filtered out
    put_crop(console, crop(10, "door", track_id=0))
    put_track(console, 1, kind="new")
    records = _read_sse(resp, 2, 10.0)
    conn.close()
    assert len(records) == 2
    import json

    kinds = sorted((json.loads(r)["kind"], json.loads(r)["camera"]) for r in records)
    assert kinds == [("crop", "door"), ("track", "door")]


def test_track_detail_draws_path_box_zones_and_lines(console: Running) -> None:
    _seed(console)
    q = urlencode({"camera": "door", "uid": UID})
    page = get(console.port, "/track?" + q)
    assert page.status == 200
    html = page.text
    path = re.search(r'<polyline class="path" id="path" points="([^"]+)"', html)
    assert path is not None and len(path.group(1).split()) >= 1
    assert 'class="zone"' in html and "zone porch" in html
    assert 'class="line"' in html and "line gate" in html
    assert 'id="clip"' in html and "no clip" in html
    assert 'class="frame"' in html  # no snapshot: a blank frame of the event's size
    assert "From capture to storage" in html and " ms<" in html
    detail = get(console.port, "/api/track?" + q).json()
    assert detail["drawing"]["width"] == 640 and detail["drawing"]["path_points"] == 1
    assert [e["type"] for e in detail["events"]] == ["new", "zone_entered", "line_crossed"]
    assert detail["crops"][0]["cloud_label"] == "car"
    assert detail["crops"][0]["edge_label"] == "person"
    assert len(detail["timings"]) == 4
    assert get(console.port, "/track?" + urlencode({"camera": "door", "uid": "5-5"})).status == 404


def test_crop_detail(console: Running) -> None:
    ev = put_crop(console, crop(3, "yard", label="dog"))
    page = get(console.port, f"/crop?id={ev.event_id}")
    assert page.status == 200 and 'id="box"' in page.text and "dog" in page.text
    assert get(console.port, "/crop?id=999999").status == 404


def test_snapshot_thumbnails_with_caching_headers(console: Running) -> None:
    _seed(console)
    body = put_snapshot(console.db, "door", UID, 1)
    put_snapshot(console.db, "door", UID, 2)
    events = get(console.port, "/api/events?camera=door").json()["events"]
    thumbs = {e["thumb"] for e in events}
    assert thumbs == {"/api/snapshot?camera=door&uid=1000-7&kind=crop"}
    r = get(console.port, events[0]["thumb"])
    assert r.status == 200 and r.body == body
    assert r.headers["content-type"] == "image/jpeg"
    assert "max-age=300" in r.headers["cache-control"] and r.headers["etag"]
    again = get(console.port, events[0]["thumb"], {"If-None-Match": r.headers["etag"]})
    assert again.status == 304 and again.body == b""
    assert get(console.port, "/api/snapshot?camera=door&uid=1000-8&kind=crop").status == 404
    page = get(console.port, "/track?" + urlencode({"camera": "door", "uid": UID})).text
    assert '<image href="/api/snapshot?camera=door&amp;uid=1000-7&amp;kind=frame"' in page


def test_no_snapshot_table_means_placeholders(console: Running) -> None:
    _seed(console)
    assert {e["thumb"] for e in get(console.port, "/api/events").json()["events"]} == {""}
    assert get(console.port, "/api/snapshot?camera=door&uid=1000-7").status == 404


def test_cameras_lists_every_camera(console: Running) -> None:
    _seed(console)
    cams = {c["camera"]: c for c in get(console.port, "/api/cameras").json()["cameras"]}
    assert set(cams) == {"door", "yard"}
    assert cams["door"]["tracks"] == 1 and cams["door"]["track_events"] == 3
    assert cams["door"]["crops"] == 1 and cams["yard"]["crops"] == 1
    assert cams["yard"]["last_event_ns"] == 1_002_500
    page = get(console.port, "/cameras")
    assert page.status == 200 and 'data-camera="door"' in page.text


def test_counts_per_zone_line_direction_and_label(console: Running) -> None:
    now = time.time_ns()
    put_track(console, 1, kind="new", capture_ns=now)
    put_track(console, 2, kind="zone_entered", zone="porch", capture_ns=now)
    for seq, d in (
        (3, events_pb2.CROSSING_DIRECTION_IN),
        (4, events_pb2.CROSSING_DIRECTION_IN),
        (5, events_pb2.CROSSING_DIRECTION_OUT),
    ):
        put_track(console, seq, kind="line_crossed", line="gate", direction=d, capture_ns=now)
    put_track(console, 6, kind="new", capture_ns=now - 30 * 24 * 3600 * 10**9)  # out of range
    for period in ("hour", "today", "day", "week"):
        body = get(console.port, f"/api/counts?period={period}").json()
        got = {
            (s["what"], s["name"], s["direction"], s["label"]): s["total"] for s in body["series"]
        }
        assert got == {
            ("objects", "", "", "person"): 1,
            ("zone", "porch", "", "person"): 1,
            ("line", "gate", "in", "person"): 2,
            ("line", "gate", "out", "person"): 1,
        }, period
        assert len(body["buckets"]) == {"hour": 60, "week": 7}.get(period, 24)
        assert {s["peak"] for s in body["series"]} == {1, 2}, "all in one bucket"
    page = get(console.port, "/counts?period=week")
    assert page.status == 200 and page.text.count('<svg class="chart"') == 4
    # One bar each (every count is in the same bucket), each chart scaled to its own peak.
    bars = re.findall(
        r'<rect class="bar" x="[\d.]+" y="([\d.]+)" width="[\d.]+" height="([\d.]+)"', page.text
    )
    assert len(bars) == 4 and all(float(y) + float(h) == 48 for y, h in bars)
    assert [float(h) for _, h in bars] == [48.0] * 4
    assert get(console.port, "/api/counts?camera=yard").json()["series"] == []


def test_security_headers(console: Running) -> None:
    r = get(console.port, "/")
    assert "script-src 'self'" in r.headers["content-security-policy"]
    assert r.headers["x-content-type-options"] == "nosniff"
    assert r.headers["cache-control"] == "no-store"
    assert get(console.port, "/static/console.js").status == 200


def test_strata_cloud_serves_the_console_and_stops_with_a_stream_open(
    tmp_path: Path, colour_model: tuple[Path, Path], start_server: Any
) -> None:
    from cloud_helpers import make_config

    model, labels = colour_model
    cfg = make_config(
        model, tmp_path / "e.sqlite", labels, http={"enabled": True, "listen": "127.0.0.1:0"}
    )
    server = start_server(cfg)
    assert server.console is not None and server.console.port
    port = server.console.port
    assert get(port, "/api/events").json() == {"events": [], "next": None}
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", "/api/events/stream")
    resp = conn.getresponse()
    assert resp.status == 200
    server.store.submit(crop(1)).result(10)
    assert len(_read_sse(resp, 1, 10.0)) == 1
    t0 = time.monotonic()
    server.stop()
    assert time.monotonic() - t0 < 15
    conn.close()
    with pytest.raises(OSError):
        get(port, "/api/events")


def test_console_off_by_default(
    tmp_path: Path, colour_model: tuple[Path, Path], start_server: Any
) -> None:
    from cloud_helpers import make_config

    model, labels = colour_model
    server = start_server(make_config(model, tmp_path / "e.sqlite", labels))
    assert server.console is None


@pytest.mark.parametrize("console", ["sqlite"], indirect=True)
def test_every_route_is_documented(console: Running) -> None:
    """docs/console.md lists every page and JSON endpoint the app serves."""
    from starlette.routing import Route

    doc = (Path(__file__).resolve().parents[2] / "docs" / "console.md").read_text()
    app = console.server.console.app
    paths = [r.path for r in app.routes if isinstance(r, Route)]
    assert "/api/rules" in paths and "/editor" in paths
    for path in paths:
        if path.startswith("/api/"):
            assert f"### `GET {path}" in doc, path
        elif path not in ("/", "/login", "/logout"):
            assert f"| `{path}" in doc, path
