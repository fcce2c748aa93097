"""Cross-camera identities and search by example (issue 42): the linker's pure function on
scenes built to tempt it, then two cameras' tracks through a real cloud server on 127.0.0.1
(SQLite and PostgreSQL): linked into identities that QueryTrackEvents and `strata cloud
query --identity` list in time order, ranked by SearchSimilar and `--similar-to`; an
embedding of the wrong size refused and counted; embeddings never in what reads return."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from cloud_helpers import make_config, stub_for
from identity_helpers import DIM, SECOND, appearance, life, people, seen
from strata.cloud.identity.linker import LinkSettings, TrackLook, link
from strata.cloud.server import CloudServer
from strata.shared.config.cloud import CloudConfig
from strata.shared.contracts import analytics_pb2, current_version, events_pb2
from strata.shared.metrics import sample

S = events_pb2


def look(key: str, camera: str, start_s: float, end_s: float, v: np.ndarray) -> TrackLook:
    return TrackLook(key, camera, int(start_s * SECOND), int(end_s * SECOND), v)


def test_people_walking_from_one_camera_to_the_next_are_linked_one_to_one() -> None:
    p = people(6)
    tracks = []
    for i in range(6):  # person i: left from 10 i s for 8 s, right from 2 s before leaving
        t = 10.0 * i
        tracks.append(look(f"L{i}", "left", t, t + 8, seen(p[i], 0.4, 100 + i)))
        tracks.append(look(f"R{i}", "right", t + 6, t + 14, seen(p[i], 0.4, 200 + i)))
    got = link(tracks, LinkSettings(threshold=0.7, window_s=30))
    assert sorted(got) == sorted((f"L{i}", f"R{i}") for i in range(6))


def test_the_best_match_wins_and_time_and_neighbours_gate() -> None:
    p = people(3, seed=1)
    twin = seen(p[0], 0.3, 7)  # looks like person 0, seen at the same time on the left
    tracks = [
        look("L0", "left", 0, 10, seen(p[0], 0.2, 1)),
        look("L0b", "left", 0, 10, twin),
        look("R0", "right", 5, 15, seen(p[0], 0.2, 2)),
        # Person 1 on the right, then on the left again an hour later: too far apart.
        look("R1", "right", 0, 10, seen(p[1], 0.2, 3)),
        look("L1", "left", 3600, 3610, seen(p[1], 0.2, 4)),
        # Person 2 on a camera that is no neighbour of the left one.
        look("L2", "left", 20, 30, seen(p[2], 0.2, 5)),
        look("G2", "garage", 25, 35, seen(p[2], 0.2, 6)),
    ]
    s = LinkSettings(threshold=0.7, window_s=60, neighbours={"left": ["right"]})
    got = link(tracks, s)
    assert got == [("L0", "R0")], "one-to-one, gated by time and by neighbours"
    assert ("G2", "L2") in [tuple(sorted(g)) for g in link(tracks, LinkSettings(0.7, 60))]


def test_a_group_never_holds_two_tracks_of_one_camera_alive_at_once() -> None:
    p = people(1, seed=2)
    tracks = [  # one person's look on three cameras, two left tracks at the same time
        look("A", "left", 0, 10, seen(p[0], 0.2, 1)),
        look("B", "right", 0, 10, seen(p[0], 0.2, 2)),
        look("C", "hall", 0, 10, seen(p[0], 0.2, 3)),
        look("D", "left", 2, 8, seen(p[0], 0.2, 4)),
    ]
    for group in link(tracks, LinkSettings(0.5, 60)):
        lefts = [k for k in group if k in ("A", "D")]
        assert len(lefts) <= 1


def identity_config(model: tuple[Path, Path], db: Path | str) -> CloudConfig:
    where: dict[str, Any] = (
        {"url": db, "connect_timeout_s": 5.0} if isinstance(db, str) else {"path": str(db)}
    )
    return make_config(
        model[0],
        Path("unused.sqlite"),
        model[1],
        store={**where, "write_delay_ms": 1.0},
        identity={"link_every_s": 0.2, "threshold": 0.7, "window_s": 30},
    )


def two_cameras() -> tuple[list[Any], list[Any], np.ndarray]:
    """Three people walk from the left camera into the right one; a fourth stays left."""
    p = people(4, seed=3)
    left: list[Any] = []
    right: list[Any] = []
    for i in range(3):
        t = 100.0 + 20 * i
        left += life("left", (int(t * SECOND), 10 + i), 1 + 2 * i, t, t + 8, seen(p[i], 0.4, i))
        right += life(
            "right", (int((t + 6) * SECOND), 20 + i), 1 + 2 * i, t + 6, t + 15,
            seen(p[i], 0.4, 50 + i),
        )  # fmt: skip
    left += life("left", (int(300 * SECOND), 99), 7, 300, 310, seen(p[3], 0.4, 9))
    return left, right, p


def send(stub: Any, events: list[Any]) -> list[Any]:
    batch = analytics_pb2.CropBatch(version=current_version(), events=events)
    return [a for r in stub.Uplink(iter([batch]), timeout=30) for a in r.event_acks]


def track_query(stub: Any, **kw: Any) -> list[Any]:
    req = analytics_pb2.QueryEventsRequest(version=current_version(), **kw)
    return [ev for page in stub.QueryTrackEvents(req, timeout=10) for ev in page.events]


def wait_linked(stub: Any, n: int, timeout: float = 20.0) -> list[Any]:
    deadline = time.monotonic() + timeout
    while True:
        got = [e for e in track_query(stub) if e.event.identity_id]
        if len({(e.event.camera_id, e.event.track_uid) for e in got}) >= n:
            return got
        assert time.monotonic() < deadline, f"{n} tracks not linked in {timeout} s"
        time.sleep(0.1)


def cli(server: CloudServer, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "strata.tools.cli", "cloud", "query", "--target", server.address,
         *args],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


@pytest.fixture(params=["sqlite", "postgres"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Path | str:
    if request.param == "postgres":
        return str(request.getfixturevalue("pg_url"))
    return tmp_path / "events.sqlite"


def test_two_cameras_tracks_are_linked_queried_and_searched(
    colour_model: tuple[Path, Path],
    db: Path | str,
    start_server: Callable[[CloudConfig], CloudServer],
) -> None:
    server = start_server(identity_config(colour_model, db))
    channel, stub = stub_for(server)
    left, right, _ = two_cameras()
    acks = send(stub, left) + send(stub, right)
    assert all(a.status == S.TRACK_EVENT_STATUS_STORED for a in acks), acks
    got = wait_linked(stub, 6)
    # Never more than the three pairs; the fourth person has no identity.
    by_track = {(e.event.camera_id, e.event.track_uid): e.event.identity_id for e in got}
    assert len(set(by_track.values())) == 3
    assert not any(e.event.HasField("appearance") for e in track_query(stub)), "embedding read"
    # Where else the first left person was seen, in time order.
    first = left[0]
    ident = by_track[("left", first.track_uid)]
    seen_at = track_query(stub, identity_id=ident)
    assert [(e.event.camera_id, e.event.type) for e in seen_at] == [
        ("left", S.TRACK_EVENT_TYPE_NEW),
        ("right", S.TRACK_EVENT_TYPE_NEW),
        ("left", S.TRACK_EVENT_TYPE_END),
        ("right", S.TRACK_EVENT_TYPE_END),
    ]
    assert seen_at[1].event.track_uid == right[0].track_uid
    caps = [e.event.capture_ns for e in seen_at]
    assert caps == sorted(caps)
    # Search by example: the same person on the other camera first; -1 ranks every track.
    req = analytics_pb2.SearchSimilarRequest(
        version=current_version(),
        camera_id="left",
        track_uid=first.track_uid,
        limit=3,
        min_similarity=-1.0,
    )
    found = stub.SearchSimilar(req, timeout=10)
    assert found.searched == 7
    assert found.tracks[0].track_uid == right[0].track_uid
    assert found.tracks[0].identity_id == ident and found.tracks[0].similarity > 0.7
    sims = [t.similarity for t in found.tracks]
    assert sims == sorted(sims, reverse=True) and len(sims) == 3
    # Without a minimum, cloud.identity.min_similarity (0.5) leaves the strangers out.
    req.min_similarity = 0.0
    found = stub.SearchSimilar(req, timeout=10)
    assert [t.track_uid for t in found.tracks] == [right[0].track_uid]
    # The CLI: --identity lists both cameras' events, --similar-to ranks.
    out = cli(server, "--identity", str(ident), "--json")
    assert out.returncode == 0, out.stderr
    rows = [json.loads(line) for line in out.stdout.splitlines()]
    assert [r["event"]["cameraId"] for r in rows] == ["left", "right", "left", "right"]
    out = cli(
        server, "--similar-to", f"left/{first.track_uid}", "--limit", "2", "--other-cameras",
        "--min-similarity", "-1",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].split()[:3] == ["RANK", "SIMILARITY", "CAMERA"]
    assert right[0].track_uid in lines[1] and len(lines) == 3
    assert all("left" not in line.split()[2] for line in lines[1:])
    channel.close()


def test_an_embedding_of_the_wrong_size_is_refused_with_the_reason_and_counted(
    colour_model: tuple[Path, Path],
    tmp_path: Path,
    start_server: Callable[[CloudConfig], CloudServer],
) -> None:
    server = start_server(identity_config(colour_model, tmp_path / "events.sqlite"))
    channel, stub = stub_for(server)
    p = people(1)
    events = life("left", (1 * SECOND, 1), 1, 1.0, 2.0, seen(p[0], 0.1, 1))
    events[0].appearance.CopyFrom(appearance(np.ones(256, np.float32), dim=256))
    events[1].appearance.float16 = events[1].appearance.float16[:-2]  # one value short
    acks = send(stub, events)
    assert [a.status for a in acks] == [S.TRACK_EVENT_STATUS_INVALID] * 2
    assert acks[0].reason.startswith("bad_appearance: appearance.dim is 256; this cloud takes 512")
    assert "cloud.identity.dim" in acks[0].reason
    assert acks[1].reason == (
        f"bad_appearance: appearance.float16 is {2 * DIM - 2} bytes; dim {DIM} needs {2 * DIM} "
        "(2 bytes a value)"
    )
    n = sample(
        server.metrics.registry,
        "strata_cloud_track_events_invalid_total",
        {"type": "new", "reason": "bad_appearance"},
    )
    assert n == 1  # and its line in the log (drops)
    # A camera without appearance (appearance off) is stored as before, beside one with it.
    plain = life("right", (1 * SECOND, 2), 1, 1.0, 2.0, seen(p[0], 0.1, 2))
    for ev in plain:
        ev.ClearField("appearance")
    assert [a.status for a in send(stub, plain)] == [S.TRACK_EVENT_STATUS_STORED] * 2
    req = analytics_pb2.SearchSimilarRequest(
        version=current_version(), camera_id="right", track_uid=plain[0].track_uid
    )
    with pytest.raises(Exception) as err:
        stub.SearchSimilar(req, timeout=10)
    assert "has no stored appearance" in str(err.value)
    channel.close()
