"""A track's event clip in the console over a real store (SQLite and a real PostgreSQL) on
a real loopback port: video/mp4 with HTTP Range (206, 416), caching headers that follow a
clip still being uploaded, and the <video> on the track page, started at the event it is
opened for, with the clip's state in words; the range parser alone."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

import pytest
from clip_helpers import C, chunk, chunks, info, make_clip
from console_helpers import Running, get, put_track
from strata.cloud.console.byte_range import ByteRange, RangeNotSatisfiableError, parse_range

UID = "1000-7"
URL = "/api/clip?" + urlencode({"camera": "door", "uid": UID})


@pytest.fixture(scope="module")
def clip() -> bytes:
    return make_clip(1.0)


def test_a_clip_is_served_with_ranges_and_caching(console: Running, clip: bytes) -> None:
    ci = info(tracks=(UID,))
    parts = chunks(clip, 50_000, ci)
    for c in parts[:2]:  # still uploading
        console.store.append_clip(c)
    partial = get(console.port, URL)
    assert partial.status == 200 and partial.body == clip[:100_000]
    assert partial.headers["cache-control"] == "private, no-cache"
    for c in parts[2:]:
        assert console.store.append_clip(c).status == 1  # STORED
    whole = get(console.port, URL)
    assert whole.status == 200 and whole.body == clip
    h = whole.headers
    assert h["content-type"] == "video/mp4" and h["accept-ranges"] == "bytes"
    assert h["content-length"] == str(len(clip)) and "max-age=86400" in h["cache-control"]
    assert h["etag"] != partial.headers["etag"]  # the clip grew: a new tag
    n = len(clip)
    for asked, start, end in (
        ("bytes=0-99", 0, 100),
        ("bytes=1000-", 1000, n),
        ("bytes=-500", n - 500, n),
        (f"bytes=60000-{n + 10}", 60_000, n),  # an end past the clip is clipped
    ):
        r = get(console.port, URL, {"Range": asked})
        assert r.status == 206 and r.body == clip[start:end], asked
        assert r.headers["content-range"] == f"bytes {start}-{end - 1}/{n}"
        assert r.headers["content-length"] == str(end - start)
    beyond = get(console.port, URL, {"Range": f"bytes={n}-"})
    assert beyond.status == 416 and beyond.headers["content-range"] == f"bytes */{n}"
    # Several ranges, or If-Range naming an older copy: all of it.
    assert get(console.port, URL, {"Range": "bytes=0-1,5-6"}).body == clip
    stale = get(console.port, URL, {"Range": "bytes=0-1", "If-Range": partial.headers["etag"]})
    assert stale.status == 200 and stale.body == clip
    again = get(console.port, URL, {"If-None-Match": h["etag"]})
    assert again.status == 304 and again.body == b""


def test_the_track_page_shows_its_clip(console: Running, clip: bytes) -> None:
    put_track(console, 1, kind="new")
    q = urlencode({"camera": "door", "uid": UID})
    assert "no clip" in get(console.port, "/track?" + q).text
    assert get(console.port, URL).status == 404
    for c in chunks(clip, 100_000, info(tracks=(UID,))):
        console.store.append_clip(c)
    html = get(console.port, "/track?" + q).text
    assert f'<video class="clip" id="clip" src="{URL.replace("&", "&amp;")}"' in html
    assert get(console.port, "/api/track?" + q).json()["clip"] == URL
    # A clip with no bytes (its reason is on the event) is not offered as a video.
    empty = chunk(b"", 0, 0, info(clip_id="door/s1/2", tracks=("2000-1",)), last=True)
    console.store.append_clip(empty)
    assert get(console.port, "/api/clip?camera=door&uid=2000-1").status == 404


def test_ranges_parse_as_rfc_9110_says() -> None:
    assert parse_range("", 100) is None
    assert parse_range("bytes=0-9", 100) == ByteRange(0, 10, 100)
    assert parse_range("bytes=90-", 100) == ByteRange(90, 100, 100)
    assert parse_range("bytes=-10", 100) == ByteRange(90, 100, 100)
    assert parse_range("bytes=-1000", 100) == ByteRange(0, 100, 100)
    assert parse_range("bytes=5-2", 100) is None
    assert parse_range("items=0-1", 100) is None
    assert parse_range("bytes=x-y", 100) is None
    assert ByteRange(0, 10, 100).content_range == "bytes 0-9/100"
    for bad in ("bytes=100-", "bytes=-0"):
        with pytest.raises(RangeNotSatisfiableError):
            parse_range(bad, 100)


def clip_state(console: Running, at_ns: int = 0) -> tuple[dict[str, Any], str]:
    """The track JSON's clip state and the track page's HTML, opened for capture time at_ns."""
    q = {"camera": "door", "uid": UID, **({"at": str(at_ns)} if at_ns else {})}
    detail = get(console.port, "/api/track?" + urlencode(q)).json()
    return detail["clip_state"], get(console.port, "/track?" + urlencode(q)).text


START = 5_000_000_000  # the clip's first frame on the capture clock


def test_the_player_starts_at_the_event_and_the_page_says_the_clips_state(
    console: Running, clip: bytes
) -> None:
    put_track(console, 1, kind="new")
    ci = info(tracks=(UID,), start_ns=START)
    parts = chunks(clip, 50_000, ci)
    console.store.append_clip(parts[0])
    state, html = clip_state(console, START + 1_500_000_000)
    assert state["state"] == "uploading" and state["final"] is False
    assert state["words"] == "still uploading" and "still uploading (50000 bytes so far)" in html
    assert state["seek_s"] == 1.5 and state["url"] == URL
    assert f'src="{URL.replace("&", "&amp;")}#t=1.500"' in html and 'data-seek="1.5"' in html
    for c in parts[1:]:
        console.store.append_clip(c)
    state, html = clip_state(console, START + 1_500_000_000)
    assert (state["state"], state["words"], state["final"]) == ("complete", "complete", True)
    assert state["committed_bytes"] == state["size_bytes"] == len(clip)
    assert 'data-state="complete"' in html and "s, the event's capture" in html
    # Past the clip's end: its end (2 s, as the chunk helper closes it); before its start:
    # its start; opened without an event: no fragment, as before.
    assert clip_state(console, START + 9_000_000_000)[0]["seek_s"] == 2.0
    assert clip_state(console, START - 1)[0]["seek_s"] == 0.0
    state, html = clip_state(console)
    assert state["seek_s"] is None and f'src="{URL.replace("&", "&amp;")}"' in html
    api = get(console.port, "/api/track?" + urlencode({"camera": "door", "uid": UID, "at": "x"}))
    assert api.status == 400 and "at must be" in api.json()["error"]
    bad = get(console.port, "/track?" + urlencode({"camera": "door", "uid": UID, "at": "-5"}))
    assert bad.status == 400 and "at must be" in bad.text


@pytest.mark.parametrize(
    ("outcome", "state", "words", "video"),
    [
        (C.CLIP_OUTCOME_CUT_SHORT, "cut_short", "cut short: the device stopped or crashed", True),
        (C.CLIP_OUTCOME_DISCONNECTED, "disconnected", "disconnected: the camera", True),
        (C.CLIP_OUTCOME_ENDED, "ended", "ended: the file ended before the clip", True),
        (C.CLIP_OUTCOME_NO_KEYFRAME, "no_keyframe", "no keyframe: none came", False),
        (C.CLIP_OUTCOME_CODEC, "codec", "codec: the camera&#39;s codec cannot", False),
        (C.CLIP_OUTCOME_ERROR, "error", "error: writing the clip failed", True),
    ],
)
def test_a_clip_that_fell_short_says_how_and_why(
    console: Running, clip: bytes, outcome: int, state: str, words: str, video: bool
) -> None:
    put_track(console, 1, kind="new")
    ci = info(tracks=(UID,), start_ns=START)
    data = clip[:60_000] if video else b""
    last = chunk(data, 0, len(data), ci, last=True)
    last.info.outcome, last.info.reason = outcome, "agent <stopped> & gone"
    last.info.notes.append("pre-roll short by 1.2s")
    assert console.store.append_clip(last).status == 1
    got, html = clip_state(console, START + 100_000_000)
    assert got["state"] == state and got["final"] and got["reason"] == "agent <stopped> & gone"
    assert f'data-state="{state}"' in html and words in html
    assert "agent &lt;stopped&gt; &amp; gone" in html and "pre-roll short by 1.2s" in html
    assert ('<video class="clip" id="clip"' in html) == video
    assert (got["url"] == URL) == video and ("no clip" in html) != video


def test_a_clip_whose_file_ended_is_not_painted_as_a_fault(console: Running) -> None:
    """Issue 39: a file that simply ended was shown in red as a stream closed mid-clip."""
    css = get(console.port, "/static/console.css").text
    rule = next(line for line in css.splitlines() if "var(--bad)" in line and "clip-state" in line)
    assert ':not([data-state="ended"])' in rule and ':not([data-state="complete"])' in rule
