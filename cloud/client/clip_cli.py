"""`strata cloud clip EVENT_OR_TRACK -o clip.mp4`: write a stored event clip to a file, from
an endpoint (GetClip, streamed) or a SQLite store file, a chunk at a time."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from strata.shared.cli.common import load_or_exit

if TYPE_CHECKING:  # the parser is built without grpc and protobuf (tools/cli.py)
    from strata.shared.contracts import clips_pb2

    from ..store.clip_rows import ClipQuery

NAME = "strata cloud clip"


def clip_query(ref: str, camera: str = "") -> ClipQuery:
    """The ClipQuery a command-line reference names: a track event's key
    (camera/track_uid/seq/type), CAMERA/TRACK_UID, a TRACK_UID (with `camera` when given) or
    a clip id (camera/session/n). ValueError for none of these."""
    from ..store.clip_rows import ClipQuery
    from ..store.track_filter import parse_track_uid

    head, _, last = ref.rpartition("/")
    _, _, seq = head.rpartition("/")
    if ref.count("/") >= 3 and seq.isdigit() and last:
        return ClipQuery(event_key=ref)
    try:
        parse_track_uid(last)
        return ClipQuery(camera_id=head or camera, track_uid=last)
    except ValueError:
        pass
    if head:
        return ClipQuery(clip_id=ref)
    raise ValueError(f"{ref!r} is not a track event key, a track uid or a clip id")


def _from_file(db: str, q: ClipQuery) -> tuple[clips_pb2.ClipInfo, Iterator[bytes]]:
    from .store_file import open_store_file

    store = open_store_file(db)
    found = store.find_clip(q)
    if found is None:
        store.close()
        raise LookupError("no clip stored")

    def read() -> Iterator[bytes]:
        pos = 0
        try:
            while pos < found.committed_bytes:
                rows = store.clip_pieces(found.info.clip_id, pos, 1)
                if not rows:
                    raise LookupError(f"the clip has no bytes at {pos}")
                offset, data = rows[0]
                yield data[pos - offset : found.committed_bytes - offset]
                pos = offset + len(data)
        finally:
            store.close()

    return found.info, read()


def _from_endpoint(
    args: argparse.Namespace, q: ClipQuery
) -> tuple[clips_pb2.ClipInfo, Iterator[bytes]]:
    from strata.shared.contracts import analytics_pb2_grpc, clips_pb2, current_version

    from .channel import not_found_as_lookup, open_channel

    channel, metadata = open_channel(args)
    stub = analytics_pb2_grpc.AnalyticsStub(channel)  # type: ignore[no-untyped-call]
    req = clips_pb2.GetClipRequest(
        version=current_version(),
        clip_id=q.clip_id,
        event_key=q.event_key,
        camera_id=q.camera_id,
        track_uid=q.track_uid,
    )
    calls = stub.GetClip(req, metadata=metadata, timeout=args.timeout)
    try:
        with not_found_as_lookup():
            first = next(calls, None)
    except BaseException:
        channel.close()
        raise
    if first is None:
        channel.close()
        raise LookupError("the endpoint sent no clip")

    def read() -> Iterator[bytes]:
        try:
            yield first.data
            for c in calls:
                yield c.data
        finally:
            channel.close()

    return first.info, read()


def _write(path: str, parts: Iterator[bytes]) -> int:
    """Write the parts to `path` (whole, or not at all); the bytes written."""
    tmp = f"{path}.part"
    size = 0
    try:
        with open(tmp, "wb") as f:
            for part in parts:
                f.write(part)
                size += len(part)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return size


def _fetch(args: argparse.Namespace) -> tuple[clips_pb2.ClipInfo, int]:
    q = clip_query(args.ref, args.camera)
    info, parts = _from_file(args.db, q) if args.db else _from_endpoint(args, q)
    return info, _write(args.output, parts)


def run_clip(args: argparse.Namespace) -> int:
    """Write a track's clip to --output; 1 when none is stored, 2 on bad input."""
    import grpc

    from ..api.clip_service import outcome_name
    from ..store.clip_rows import ClipLookupError
    from ..store.registry import StoreError

    load_or_exit(args, {}, "cloud clip")
    try:
        info, size = _fetch(args)
    except (ClipLookupError, StoreError, ValueError, OSError) as exc:
        print(f"{NAME}: {exc}", file=sys.stderr)
        return 2
    except LookupError as exc:  # no clip, or NOT_FOUND
        print(f"{NAME}: {exc.args[0] if exc.args else exc} for {args.ref}", file=sys.stderr)
        return 1
    except grpc.RpcError as exc:
        print(f"{NAME}: {exc.code().name}: {exc.details()}", file=sys.stderr)
        return 1
    state = outcome_name(info.outcome) if info.final else "incomplete (still uploading)"
    print(
        f"{args.output}\t{info.clip_id}\t{state}\t{size} bytes\t{info.codec} "
        f"{info.width}x{info.height}\t{(info.end_ns - info.start_ns) / 1e9:.2f} s"
        + (f"\t{info.reason}" if info.reason else "")
    )
    return 0


def register_clip(sub: Any) -> argparse.ArgumentParser:
    """Add `cloud clip` (the caller adds the client flags)."""
    c: argparse.ArgumentParser = sub.add_parser(
        "clip",
        help="write a track's event clip (MP4) to a file",
        description="Fetch a stored event clip (GetClip) and write it. EVENT_OR_TRACK is a "
        "track event's idempotency key (camera/track_uid/seq/type), CAMERA/TRACK_UID, a "
        "TRACK_UID (with --camera when several cameras have it) or a clip id "
        "(camera/session/n).",
    )
    c.add_argument("ref", metavar="EVENT_OR_TRACK", help="event key, track uid or clip id")
    c.add_argument("-o", "--output", required=True, metavar="FILE", help="MP4 file to write")
    c.add_argument("--camera", default="", help="the track's camera (with a bare TRACK_UID)")
    c.add_argument("--target", default="127.0.0.1:50051", help="HOST:PORT of the endpoint")
    c.add_argument("--db", metavar="PATH", help="read this SQLite event store directly instead")
    c.add_argument("--timeout", type=float, default=300.0, help="seconds the download may take")
    c.set_defaults(func=run_clip)
    return c
