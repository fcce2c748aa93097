"""`strata cloud query --similar-to TRACK`: the stored tracks most like one track, across
cameras and time (SearchSimilar, or a SQLite store file read directly), most similar first.
`--identity ID` (in cloud/cli.py) lists where else one identity was seen."""

from __future__ import annotations

import argparse
import sys
from typing import Any

NAME = "strata cloud query"
SIMILAR_COLUMNS = (
    "RANK", "SIMILARITY", "CAMERA", "TRACK", "LABEL", "FIRST", "LAST", "IDENTITY",
)  # fmt: skip


def add_flags(q: argparse.ArgumentParser) -> None:
    """The identity flags of `strata cloud query`."""
    q.add_argument(
        "--identity",
        type=int,
        default=0,
        metavar="ID",
        help="only track events of this cross-camera identity (where else it was seen, in "
        "time order); implies --tracks",
    )
    q.add_argument(
        "--similar-to",
        default="",
        metavar="TRACK",
        help="print the stored tracks that look most like this one (CAMERA/TRACK_UID, or "
        "TRACK_UID with --camera), most similar first, across cameras and time; --limit "
        "bounds them",
    )
    q.add_argument(
        "--min-similarity",
        type=float,
        default=0.0,
        help="with --similar-to: only tracks at least this similar (cosine; 0: the cloud's "
        "cloud.identity.min_similarity, 0.5 with --db; -1: every track)",
    )
    q.add_argument(
        "--other-cameras",
        action="store_true",
        help="with --similar-to: leave out the example's own camera",
    )


def parse_track_ref(ref: str, camera: str) -> tuple[str, str]:
    """(camera_id, track_uid) of CAMERA/TRACK_UID or TRACK_UID (with `camera`)."""
    from ..store.track_filter import parse_track_uid

    head, _, uid = ref.rpartition("/")
    cam = head or camera
    if not cam:
        raise ValueError(f"--similar-to {ref!r}: name the camera (CAMERA/TRACK_UID or --camera)")
    parse_track_uid(uid)
    return cam, uid


def _cells(rank: int, t: Any) -> tuple[str, ...]:
    from strata.shared.cli.table import local_time

    return (
        str(rank),
        f"{t.similarity:.3f}",
        t.camera_id,
        t.track_uid,
        t.label,
        local_time(t.first_seen_ns),
        local_time(t.last_seen_ns),
        str(t.identity_id or ""),
    )


def _print(tracks: list[Any], as_json: bool) -> None:
    from strata.shared.cli.table import Table

    if as_json:
        import json

        from google.protobuf.json_format import MessageToDict

        for t in tracks:
            print(json.dumps(MessageToDict(t)))
        return
    if not tracks:
        print(f"{NAME}: no similar tracks", file=sys.stderr)
        return
    table = Table(SIMILAR_COLUMNS)
    for i, t in enumerate(tracks, 1):
        table.add(*_cells(i, t))
    for line in table.lines():
        sys.stdout.write(line + "\n")


def _from_file(args: argparse.Namespace, camera: str, uid: str) -> list[Any]:
    from ..api.identity_service import similar_track
    from ..identity.service import Searcher
    from ..metrics import CloudMetrics
    from .store_file import open_store_file

    store = open_store_file(args.db)
    try:
        found, _ = Searcher(store, CloudMetrics()).search(
            camera, uid, max(args.limit, 1), args.min_similarity, args.other_cameras
        )
    finally:
        store.close()
    return [similar_track(s) for s in found]


def _from_endpoint(args: argparse.Namespace, camera: str, uid: str) -> list[Any]:
    from strata.shared.contracts import analytics_pb2, analytics_pb2_grpc, current_version

    from .channel import open_channel

    channel, metadata = open_channel(args)
    try:
        stub = analytics_pb2_grpc.AnalyticsStub(channel)  # type: ignore[no-untyped-call]
        req = analytics_pb2.SearchSimilarRequest(
            version=current_version(),
            camera_id=camera,
            track_uid=uid,
            limit=max(args.limit, 1),
            min_similarity=args.min_similarity,
            other_cameras=args.other_cameras,
        )
        return list(stub.SearchSimilar(req, metadata=metadata, timeout=30).tracks)
    finally:
        channel.close()


def run_similar(args: argparse.Namespace) -> int:
    """Print the tracks most like --similar-to's; 2 for bad input, 1 when the call fails."""
    import grpc

    from ..store.event_store import StoreError

    try:
        camera, uid = parse_track_ref(args.similar_to, args.camera)
        tracks = (_from_file if args.db else _from_endpoint)(args, camera, uid)
    except (ValueError, LookupError, StoreError, OSError) as exc:
        print(f"{NAME}: {exc}", file=sys.stderr)
        return 2
    except grpc.RpcError as exc:
        print(f"{NAME}: {exc.code().name}: {exc.details()}", file=sys.stderr)
        return 1
    _print(tracks, args.json)
    return 0
