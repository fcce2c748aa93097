"""`strata cloud`: run the gRPC endpoint; `strata cloud query`: list stored events (classified
crops, or with --tracks or a track-event filter the track lifecycle and rule events);
`strata cloud snapshot`: write a track's snapshot JPEG to a file; `strata cloud clip`: a
track's event clip (clip_cli)."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

from strata.shared.cli.common import add_config_flag, load_or_exit, prune

from .client.channel import not_found_as_lookup, open_channel
from .client.clip_cli import register_clip
from .client.identity_cli import add_flags as add_identity_flags
from .client.store_file import open_store_file

log = logging.getLogger(__name__)


def register(subparsers: Any) -> None:
    """Add `cloud` (and `cloud query`) to the strata CLI."""
    p = subparsers.add_parser(
        "cloud",
        help="run the cloud gRPC endpoint (classify crops, store and query events)",
        description="Run the cloud gRPC endpoint. Everything not given here comes from the "
        "config file's `cloud` section.",
    )
    add_config_flag(p)
    p.add_argument("--listen", metavar="HOST:PORT", help="override cloud.listen")
    p.add_argument(
        "--db",
        metavar="PATH",
        help="override cloud.store.path (SQLite file; unused when cloud.store.url is set)",
    )
    p.set_defaults(func=run)
    sub = p.add_subparsers(dest="cloud_command", metavar="COMMAND")
    q = sub.add_parser("query", help="print stored events of a running endpoint")
    add_config_flag(q)
    q.add_argument("--target", default="127.0.0.1:50051", help="HOST:PORT of the endpoint")
    q.add_argument(
        "--db",
        metavar="PATH",
        help="read this SQLite event store directly (e.g. demo-out/events.sqlite) instead "
        "of asking an endpoint",
    )
    q.add_argument("--camera", default="", help="only this camera")
    q.add_argument("--label", default="", help="only this label")
    q.add_argument("--start-ns", type=int, default=0, help="from this capture time (ns)")
    q.add_argument("--end-ns", type=int, default=0, help="before this capture time (ns)")
    q.add_argument("--limit", type=int, default=100, help="print at most this many events")
    q.add_argument(
        "--group-by-track",
        action="store_true",
        help="one event per tracked object (its latest), with its event count",
    )
    q.add_argument(
        "--tracks",
        action="store_true",
        help="print track lifecycle and rule events (QueryTrackEvents) instead of crops",
    )
    q.add_argument(
        "--type",
        action="append",
        default=[],
        metavar="TYPE",
        help="only track events of this type (new, update, end, line_crossed, zone_entered, "
        "zone_left, dwell_exceeded, stationary, active); repeat for several; implies --tracks",
    )
    q.add_argument("--zone", default="", help="only track events of this zone; implies --tracks")
    q.add_argument("--line", default="", help="only track events of this line; implies --tracks")
    q.add_argument("--rule", default="", help="only track events of this rule; implies --tracks")
    q.add_argument(
        "--track",
        default="",
        metavar="UID_OR_ID",
        help="only this track: its uid (<first_seen_ns>-<track_id>) or its tracker id",
    )
    add_identity_flags(q)
    _add_client_flags(q)
    q.add_argument("--json", action="store_true", help="one JSON object per event")
    q.set_defaults(func=run_query)
    _register_snapshot(sub)
    clip = register_clip(sub)
    add_config_flag(clip)
    _add_client_flags(clip)


def _add_client_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--token-file", default="", help="file with the bearer token")
    p.add_argument("--ca-file", default="", help="PEM CA of the server (turns on TLS)")
    p.add_argument("--cert-file", default="", help="client certificate (mTLS)")
    p.add_argument("--key-file", default="", help="client key (mTLS)")


def _register_snapshot(sub: Any) -> None:
    s = sub.add_parser(
        "snapshot",
        help="write a track's snapshot JPEG (best crop or full frame) to a file",
        description="Fetch a track's stored snapshot (GetSnapshot) and write its JPEG. "
        "EVENT_OR_TRACK is a track event's idempotency key (camera/track_uid/seq/type), a "
        "snapshot id (camera/track_uid/best_crop|full_frame/revision), CAMERA/TRACK_UID, or "
        "a TRACK_UID (with --camera when several cameras have it).",
    )
    add_config_flag(s)
    s.add_argument("ref", metavar="EVENT_OR_TRACK", help="event key, snapshot id or track uid")
    s.add_argument("-o", "--output", required=True, metavar="FILE", help="JPEG file to write")
    s.add_argument(
        "--kind",
        default="",
        help="best_crop (the default) or full_frame; a snapshot id names its own",
    )
    s.add_argument("--camera", default="", help="the track's camera (with a bare TRACK_UID)")
    s.add_argument("--target", default="127.0.0.1:50051", help="HOST:PORT of the endpoint")
    s.add_argument("--db", metavar="PATH", help="read this SQLite event store directly instead")
    _add_client_flags(s)
    s.set_defaults(func=run_snapshot)


def run(args: argparse.Namespace) -> int:
    """Serve until SIGINT or SIGTERM."""
    import faulthandler
    import signal
    import threading

    from strata.shared.metrics_web import MetricsSecurityError
    from strata.shared.runtime import ModelLoadError

    from .outbox.tracked import announced_labels
    from .security import SecurityError
    from .server import CloudServer
    from .store.registry import StoreError

    overrides = prune({"cloud": {"listen": args.listen, "store": {"path": args.db}}})
    cfg = load_or_exit(args, overrides, "cloud")
    try:
        server = CloudServer(
            cfg.cloud,
            repository=cfg.models.repository,
            rules=cfg.rules,
            tracked=announced_labels(cfg),
        )
        server.start()
    except (SecurityError, MetricsSecurityError, ModelLoadError, StoreError, OSError) as exc:
        print(f"strata cloud: {exc}", file=sys.stderr)
        return 2
    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())

    def _hup(_signum: int, _frame: Any) -> None:
        # A repository classifier switches versions at run time (cloud.versions).
        log.info("SIGHUP: looking for a newer model version")
        server.request_model_check()

    signal.signal(signal.SIGHUP, _hup)
    print(f"strata cloud: listening on {server.address}", flush=True)
    if server.console is not None:
        print(f"strata cloud: console on {server.console.url}", flush=True)
    done.wait()
    # A shutdown that hangs says where: every thread's stack on stderr once it runs over
    # the grace by 20 s (the timer dies with the process when it exits in time).
    faulthandler.dump_traceback_later(cfg.cloud.grace_s + 20.0, exit=False)
    server.stop()
    return 0


EVENT_COLUMNS = ("ID", "TIME", "CAMERA", "LABEL", "SCORE", "VERDICT", "CROP", "TRACK", "MODEL")
TRACK_COLUMNS = (
    "ID", "TIME", "CAMERA", "TYPE", "LABEL", "TRACK", "WHERE", "RULE", "DWELL", "SEEN", "VERDICT",
)  # fmt: skip


class _Output:
    """What `strata cloud query` prints: a table with headers and local times, printed
    once every row is in (widths need them all, --limit bounds them), or with --json one
    message per line as it comes (unchanged)."""

    def __init__(self, tracks: bool, as_json: bool) -> None:
        from strata.shared.cli.table import Table

        self.as_json = as_json
        self.cells = _track_cells if tracks else _event_cells
        self.table = Table(TRACK_COLUMNS if tracks else EVENT_COLUMNS)

    def add(self, message: Any) -> None:
        if self.as_json:
            import json

            from google.protobuf.json_format import MessageToDict

            print(json.dumps(MessageToDict(message)))
        else:
            self.table.add(*self.cells(message))

    def close(self) -> None:
        if self.as_json:
            return
        if not self.table.rows:
            print("strata cloud query: no events match", file=sys.stderr)
            return
        # Line by line: one huge write that a closed pipe cuts short is not always an error.
        for line in self.table.lines():
            sys.stdout.write(line + "\n")


def _event_cells(ev: Any) -> tuple[str, ...]:
    from strata.shared.cli.table import local_time

    from .classify.verdicts import event_verdict
    from .store.event_rows import object_label

    # The detector's label and score, the cloud's verdict beside them (never instead).
    det = ev.edge_detection
    verdict = event_verdict(ev)
    return (
        str(ev.event_id),
        local_time(ev.capture_ns),
        ev.camera_id,
        object_label(ev),
        f"{det.score if det.label else ev.score:.3f}",
        verdict.text if verdict is not None else f"cloud {ev.label} {ev.score:.3f}",
        f"{ev.edge_id}/{ev.crop_id}",
        f"{ev.track_id} x{ev.track_events}" if ev.track_id else "",
        f"{_model_name(ev)}v{ev.model_version}" if ev.HasField("model_version") else "",
    )


def _model_name(ev: Any) -> str:
    return f"{ev.model} " if ev.model else ""


def _wants_tracks(args: argparse.Namespace) -> bool:
    return bool(args.tracks or args.type or args.zone or args.line or args.rule or args.identity)


def _track_filter(args: argparse.Namespace) -> dict[str, Any]:
    """The request's track fields (`--track` as uid or id); ValueError on a bad value."""
    from .store.track_filter import parse_track_uid, parse_type

    out: dict[str, Any] = {}
    if args.track:
        if args.track.isdigit():
            out["track_id"] = int(args.track)
        else:
            parse_track_uid(args.track)
            out["track_uid"] = args.track
    if _wants_tracks(args):
        out.update(
            types=[parse_type(t) for t in args.type],
            zone=args.zone,
            line=args.line,
            rule=args.rule,
            identity_id=args.identity,
        )
    return out


def _track_cells(stored: Any) -> tuple[str, ...]:
    from strata.shared.cli.table import local_time

    from .classify.verdicts import track_verdict
    from .store.track_filter import type_name

    ev = stored.event
    where = ""
    if ev.zone:
        where = f"zone {ev.zone}"
    if ev.line:
        direction = {1: " in", 2: " out"}.get(ev.direction, "")
        where = f"line {ev.line}{direction}"
    verdict = track_verdict(ev)
    if verdict is not None:
        seen_by_cloud = verdict.text
    elif ev.HasField("verdict"):  # a crop stored before verdicts were: the classifier's label
        seen_by_cloud = f"cloud {ev.verdict.label} {ev.verdict.score:.3f}"
    else:
        seen_by_cloud = ""
    return (
        str(stored.stored_id),
        local_time(ev.capture_ns),
        ev.camera_id,
        type_name(ev.type),
        ev.after.label,
        f"{ev.track_uid}#{ev.track_sequence}" + (f" id {ev.identity_id}" if ev.identity_id else ""),
        where,
        ev.rule,
        f"{ev.dwell_s:.1f}s" if ev.dwell_s else "",
        "observed" if ev.observed else "predicted",
        seen_by_cloud,
    )


def _query_file(args: argparse.Namespace) -> int:
    """Print events of a SQLite store file, oldest first, without an endpoint."""
    from .store.registry import StoreError

    try:
        store = open_store_file(args.db)
    except (LookupError, StoreError) as exc:
        print(f"strata cloud query: {exc}", file=sys.stderr)
        return 2
    try:
        out = _Output(_wants_tracks(args), args.json)
        if _wants_tracks(args):
            _print_file_tracks(store, args, out)
        else:
            _print_file_events(store, args, out)
        out.close()
    except (StoreError, ValueError) as exc:
        print(f"strata cloud query: {exc}", file=sys.stderr)
        return 2
    finally:
        store.close()
    return 0


def _print_file_events(store: Any, args: argparse.Namespace, out: _Output) -> None:
    from .store.registry import EventQuery

    track = _track_filter(args)
    q = EventQuery(
        args.camera,
        args.label,
        args.start_ns,
        args.end_ns,
        args.group_by_track,
        track.get("track_id", 0),
        track.get("track_uid", ""),
    )
    shown, after = 0, None
    while shown < args.limit:
        events, after = store.query(q, after, min(args.limit - shown, 1000))
        for ev in events:
            out.add(ev)
        shown += len(events)
        if after is None or not events:
            break


def _print_file_tracks(store: Any, args: argparse.Namespace, out: _Output) -> None:
    from .store.registry import TrackQuery

    track = _track_filter(args)
    q = TrackQuery(
        camera_id=args.camera,
        label=args.label,
        start_ns=args.start_ns,
        end_ns=args.end_ns,
        types=tuple(track["types"]),
        zone=args.zone,
        line=args.line,
        rule=args.rule,
        track_id=track.get("track_id", 0),
        track_uid=track.get("track_uid", ""),
        identity_id=track["identity_id"],
    )
    shown, after = 0, None
    while shown < args.limit:
        events, after = store.query_tracks(q, after, min(args.limit - shown, 1000))
        for ev in events:
            out.add(ev)
        shown += len(events)
        if after is None or not events:
            break


def run_query(args: argparse.Namespace) -> int:
    """Print events from QueryEvents (or a store file), oldest first."""
    import grpc
    from strata.shared.contracts import analytics_pb2, analytics_pb2_grpc, current_version

    load_or_exit(args, {}, "cloud query")
    if args.similar_to:
        from .client.identity_cli import run_similar

        return run_similar(args)
    if args.db:
        return _query_file(args)
    try:
        channel, metadata = open_channel(args)
    except OSError as exc:
        print(f"strata cloud query: {exc}", file=sys.stderr)
        return 2
    try:
        track = _track_filter(args)
    except ValueError as exc:
        print(f"strata cloud query: {exc}", file=sys.stderr)
        channel.close()
        return 2
    stub = analytics_pb2_grpc.AnalyticsStub(channel)  # type: ignore[no-untyped-call]
    req = analytics_pb2.QueryEventsRequest(
        version=current_version(),
        camera_id=args.camera,
        label=args.label,
        start_ns=args.start_ns,
        end_ns=args.end_ns,
        page_size=min(max(args.limit, 1), 1000),
        group_by_track=args.group_by_track,
        **track,
    )
    tracks = _wants_tracks(args)
    rpc = stub.QueryTrackEvents if tracks else stub.QueryEvents
    out = _Output(tracks, args.json)
    shown = 0
    try:
        for page in rpc(req, metadata=metadata, timeout=30):
            for ev in page.events:
                if shown >= args.limit:
                    break
                shown += 1
                out.add(ev)
            if shown >= args.limit:
                break
        out.close()
    except grpc.RpcError as exc:
        out.close()  # the rows that came before the error
        print(f"strata cloud query: {exc.code().name}: {exc.details()}", file=sys.stderr)
        return 1
    finally:
        channel.close()
    return 0


def snapshot_query(ref: str, camera: str = "", kind: str = "") -> Any:
    """The SnapshotQuery a command-line reference names (see `strata cloud snapshot -h`);
    ValueError for a bad kind."""
    from strata.shared.snapshot_ids import parse_kind, parse_snapshot_id

    from .store.snapshot_rows import SnapshotQuery

    k = parse_kind(kind) if kind else 0
    try:
        parse_snapshot_id(ref)
        return SnapshotQuery(snapshot_id=ref, kind=k)
    except ValueError:
        pass
    head, _, kind_or_type = ref.rpartition("/")
    _, _, seq = head.rpartition("/")
    if ref.count("/") >= 3 and seq.isdigit() and kind_or_type:
        return SnapshotQuery(event_key=ref, kind=k)
    cam, _, uid = ref.rpartition("/")
    return SnapshotQuery(camera_id=cam or camera, track_uid=uid, kind=k)


def _fetch_file(args: argparse.Namespace, q: Any) -> Any:
    """The SnapshotRow from a SQLite store file; raises the store's errors."""
    store = open_store_file(args.db)
    try:
        return store.find_snapshot(q)
    finally:
        store.close()


def _fetch_remote(args: argparse.Namespace, q: Any) -> Any:
    """The GetSnapshotResponse from an endpoint (None: NOT_FOUND); raises grpc.RpcError."""
    from strata.shared.contracts import analytics_pb2, analytics_pb2_grpc, current_version

    channel, metadata = open_channel(args)
    try:
        stub = analytics_pb2_grpc.AnalyticsStub(channel)  # type: ignore[no-untyped-call]
        req = analytics_pb2.GetSnapshotRequest(
            version=current_version(),
            event_key=q.event_key,
            snapshot_id=q.snapshot_id,
            camera_id=q.camera_id,
            track_uid=q.track_uid,
            kind=q.kind,
        )
        with not_found_as_lookup():
            return stub.GetSnapshot(req, metadata=metadata, timeout=30)
    finally:
        channel.close()


def run_snapshot(args: argparse.Namespace) -> int:
    """Write a track's snapshot JPEG to --output; 1 when none is stored, 2 on bad input."""
    from pathlib import Path

    import grpc
    from strata.shared.snapshot_ids import kind_name

    from .store.registry import StoreError

    load_or_exit(args, {}, "cloud snapshot")
    name = "strata cloud snapshot"
    try:
        q = snapshot_query(args.ref, args.camera, args.kind)
    except ValueError as exc:
        print(f"{name}: {exc}", file=sys.stderr)
        return 2
    try:
        got = _fetch_file(args, q) if args.db else _fetch_remote(args, q)
    except LookupError as exc:  # unknown event or track, or NOT_FOUND
        print(f"{name}: {exc.args[0] if exc.args else exc}", file=sys.stderr)
        return 1
    except (StoreError, ValueError, OSError) as exc:
        print(f"{name}: {exc}", file=sys.stderr)
        return 2
    except grpc.RpcError as exc:
        print(f"{name}: {exc.code().name}: {exc.details()}", file=sys.stderr)
        return 1
    if got is None:
        print(f"{name}: no snapshot stored for {args.ref}", file=sys.stderr)
        return 1
    snap = got.snapshot
    try:
        Path(args.output).write_bytes(snap.jpeg)
    except OSError as exc:
        print(f"{name}: cannot write {args.output}: {exc.strerror}", file=sys.stderr)
        return 2
    print(
        f"{args.output}\t{snap.snapshot_id}\t{kind_name(snap.kind)}\t{snap.width}x{snap.height}"
        f"\t{snap.label}\t{snap.score:.3f}\t{len(snap.jpeg)} bytes"
    )
    return 0
