"""Event clips as table rows (schema 6): the tables, the resumable append UploadClip needs
and the reads GetClip and the console need, shared by every SQL back end (only the
placeholder, the column types and the row lock differ).

A clip is one `clips` row (its latest ClipInfo, how many bytes are committed, whether it is
final), its bytes as `clip_chunks` rows keyed by (clip_id, byte_offset) in the same
database (so every replica on a shared database serves every clip), and one `clip_tracks`
row per track it shows (lookup by track, and by a track event's key through its track).

Invariant: the chunks of a clip tile [0, committed_bytes) exactly, because a chunk is only
ever appended at the committed offset, in the transaction that moves the offset. A chunk
wholly below the offset is a resend and changes nothing; one past it is a gap (RETRY: the
device goes back to the offset); once final, nothing more is appended. The one way back:
a last chunk with `cut_back` that ends below the offset (the device cut the clip back to
a byte prefix of what it sent, issue 39) truncates the chunks to its end, in the
transaction that makes the clip final.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from strata.shared.contracts import clips_pb2

from .track_filter import parse_track_uid

C = clips_pb2


def table_sql(blob: str, big: str) -> tuple[str, ...]:
    """CREATE TABLE statements for a back end's blob and 64-bit integer types."""
    return (
        f"""CREATE TABLE clips (
            clip_id TEXT PRIMARY KEY,
            camera_id TEXT NOT NULL,
            agent_id TEXT NOT NULL,
            start_ns {big} NOT NULL,
            end_ns {big} NOT NULL,
            committed_bytes {big} NOT NULL,
            is_final INTEGER NOT NULL,
            outcome INTEGER NOT NULL,
            stored_ns {big} NOT NULL,
            updated_ns {big} NOT NULL,
            info {blob} NOT NULL
        )""",
        f"""CREATE TABLE clip_chunks (
            clip_id TEXT NOT NULL,
            byte_offset {big} NOT NULL,
            size {big} NOT NULL,
            data {blob} NOT NULL,
            PRIMARY KEY (clip_id, byte_offset)
        )""",
        """CREATE TABLE clip_tracks (
            clip_id TEXT NOT NULL,
            camera_id TEXT NOT NULL,
            track_uid TEXT NOT NULL,
            PRIMARY KEY (clip_id, track_uid)
        )""",
    )


# A track's clips (GetClip by track or event, retention); a uid without its camera; a
# camera's clips in time (the console, cost).
INDEXES = (
    "CREATE INDEX clip_tracks_track ON clip_tracks (camera_id, track_uid)",
    "CREATE INDEX clip_tracks_uid ON clip_tracks (track_uid)",
    "CREATE INDEX clips_camera_time ON clips (camera_id, start_ns)",
)

# What a read returns: info, committed_bytes, stored_ns, updated_ns.
_READ = "c.info, c.committed_bytes, c.stored_ns, c.updated_ns"

# The cursor-returning `execute` of a back end's connection inside a transaction.
Run = Callable[[str, Any], Any]
Read = Callable[[str, Any], list[tuple[Any, ...]]]


@dataclass(frozen=True, slots=True)
class ClipWrite:
    """The outcome of one chunk: its ack's status and committed size, and what changed.

    `code` names a refusal (metric label; '' when stored), `appended` the bytes newly
    committed, `started` whether the chunk made the clip's row, `finished` whether it made
    the clip final, `complete` whether the clip is final (now or before), `cut` the bytes
    a cut-back last chunk dropped."""

    status: int
    committed: int
    reason: str = ""
    code: str = ""
    appended: int = 0
    started: bool = False
    finished: bool = False
    complete: bool = False
    cut: int = 0


@dataclass(frozen=True, slots=True)
class ClipRow:
    """A stored clip: its latest info and how much of it is committed."""

    info: clips_pb2.ClipInfo
    committed_bytes: int
    stored_ns: int
    updated_ns: int

    @property
    def final(self) -> bool:
        """The clip is closed and all of it is stored."""
        return self.info.final


@dataclass(frozen=True, slots=True)
class ClipQuery:
    """Which clip: by clip_id, by a track event's idempotency key, or by track_uid (with
    camera_id, or alone when unique over cameras)."""

    clip_id: str = ""
    event_key: str = ""
    camera_id: str = ""
    track_uid: str = ""


class ClipLookupError(ValueError):
    """A request that names no single clip or track (ambiguous uid, malformed key)."""


def _refuse(status: int, committed: int, code: str, reason: str) -> ClipWrite:
    return ClipWrite(status, committed, reason=f"{code}: {reason}", code=code)


def _locked(run: Run, clip_id: str, ph: str, lock: str) -> tuple[int, bool, str] | None:
    row = run(
        f"SELECT committed_bytes, is_final, camera_id FROM clips WHERE clip_id = {ph}{lock}",
        (clip_id,),
    ).fetchone()
    return None if row is None else (int(row[0]), bool(row[1]), str(row[2]))


def _open_row(run: Run, info: clips_pb2.ClipInfo, now_ns: int, ph: str) -> bool:
    """The clip's row with nothing committed; False when another transaction made it."""
    cols = (
        "clip_id, camera_id, agent_id, start_ns, end_ns, committed_bytes, is_final, outcome, "
        "stored_ns, updated_ns, info"
    )
    info_open = clips_pb2.ClipInfo()
    info_open.CopyFrom(info)
    info_open.final, info_open.size_bytes = False, 0
    info_open.outcome = C.CLIP_OUTCOME_UNSPECIFIED
    got = run(
        f"INSERT INTO clips ({cols}) VALUES ({', '.join([ph] * 11)}) "
        "ON CONFLICT DO NOTHING RETURNING clip_id",
        (
            info.clip_id,
            info.camera_id,
            info.agent_id,
            info.start_ns,
            info.end_ns,
            0,
            0,
            0,
            now_ns,
            now_ns,
            info_open.SerializeToString(),
        ),
    ).fetchone()
    return got is not None


def _commit(
    run: Run, chunk: clips_pb2.ClipChunk, data: bytes, at: int, now_ns: int, ph: str
) -> None:
    """Append `data` at offset `at` and move the clip's row to the chunk's info."""
    info = chunk.info
    if data:
        run(
            f"INSERT INTO clip_chunks (clip_id, byte_offset, size, data) "
            f"VALUES ({ph}, {ph}, {ph}, {ph})",
            (info.clip_id, at, len(data), data),
        )
    run(
        f"UPDATE clips SET committed_bytes = {ph}, is_final = {ph}, outcome = {ph}, "
        f"agent_id = {ph}, start_ns = {ph}, end_ns = {ph}, updated_ns = {ph}, info = {ph} "
        f"WHERE clip_id = {ph}",
        (
            at + len(data),
            1 if chunk.last else 0,
            int(info.outcome) if chunk.last else 0,
            info.agent_id,
            info.start_ns,
            info.end_ns,
            now_ns,
            info.SerializeToString(),
            info.clip_id,
        ),
    )
    for uid in dict.fromkeys(info.track_uids):
        run(
            f"INSERT INTO clip_tracks (clip_id, camera_id, track_uid) VALUES ({ph}, {ph}, {ph}) "
            "ON CONFLICT DO NOTHING",
            (info.clip_id, info.camera_id, uid),
        )


def append(run: Run, chunk: clips_pb2.ClipChunk, now_ns: int, ph: str, lock: str) -> ClipWrite:
    """Store a checked chunk (clip_checks) in the caller's transaction, as the module's
    invariant says. `lock` is the back end's row lock (" FOR UPDATE", or '' where the
    transaction holds the whole database). Replicas racing on a new clip serialise on its
    primary key: the loser waits for the winner's row, then locks it."""
    info = chunk.info
    end = chunk.offset + len(chunk.data)
    row = _locked(run, info.clip_id, ph, lock)
    started = False
    if row is None:
        if chunk.offset > 0:
            return _refuse(C.CLIP_CHUNK_STATUS_RETRY, 0, "gap", "no bytes of the clip stored yet")
        started = _open_row(run, info, now_ns, ph)
        row = _locked(run, info.clip_id, ph, lock)
        assert row is not None  # ours, or the committed row of the replica that won
    committed, final, camera = row
    if camera != info.camera_id:
        return _refuse(
            C.CLIP_CHUNK_STATUS_INVALID, committed, "camera", f"the clip is camera {camera!r}'s"
        )
    if final or (end <= committed and not chunk.last):
        if end <= committed:  # a resend: nothing changes
            return ClipWrite(C.CLIP_CHUNK_STATUS_STORED, committed, started=started, complete=final)
        return _refuse(
            C.CLIP_CHUNK_STATUS_INVALID, committed, "final", f"the clip ended at {committed} bytes"
        )
    if chunk.offset > committed:
        return _refuse(
            C.CLIP_CHUNK_STATUS_RETRY,
            committed,
            "gap",
            f"chunk starts at {chunk.offset}; {committed} bytes are stored",
        )
    if end < committed and chunk.cut_back:  # cut back to a prefix of what is stored
        _cut(run, info.clip_id, end, ph)
        _commit(run, chunk, b"", end, now_ns, ph)
        return ClipWrite(
            C.CLIP_CHUNK_STATUS_STORED,
            end,
            started=started,
            finished=True,
            complete=True,
            cut=committed - end,
        )
    if end < committed:  # a last chunk that ends before what is stored
        return _refuse(
            C.CLIP_CHUNK_STATUS_INVALID,
            committed,
            "size_mismatch",
            f"the clip ends at {end} bytes but {committed} are stored",
        )
    data = bytes(chunk.data[committed - chunk.offset :])
    _commit(run, chunk, data, committed, now_ns, ph)
    return ClipWrite(
        C.CLIP_CHUNK_STATUS_STORED,
        committed + len(data),
        appended=len(data),
        started=started,
        finished=chunk.last,
        complete=chunk.last,
    )


def _cut(run: Run, clip_id: str, end: int, ph: str) -> None:
    """Truncate a clip's chunks to [0, end): the chunks past it go, the one across it
    keeps its head."""
    run(f"DELETE FROM clip_chunks WHERE clip_id = {ph} AND byte_offset >= {ph}", (clip_id, end))
    across = run(
        f"SELECT byte_offset, data FROM clip_chunks WHERE clip_id = {ph} "
        f"AND byte_offset + size > {ph}",
        (clip_id, end),
    ).fetchone()
    if across is not None:
        offset = int(across[0])
        head = bytes(across[1])[: end - offset]
        run(
            f"UPDATE clip_chunks SET size = {ph}, data = {ph} WHERE clip_id = {ph} "
            f"AND byte_offset = {ph}",
            (len(head), head, clip_id, offset),
        )


def from_row(row: tuple[Any, ...]) -> ClipRow:
    """A ClipRow from (info, committed_bytes, stored_ns, updated_ns)."""
    info = clips_pb2.ClipInfo.FromString(bytes(row[0]))
    return ClipRow(info, int(row[1]), int(row[2]), int(row[3]))


def _track_of_key(key: str, read: Read, ph: str) -> tuple[str, str]:
    rows = read(
        f"SELECT camera_id, track_uid FROM track_events WHERE idempotency_key = {ph}", (key,)
    )
    if rows:
        return str(rows[0][0]), str(rows[0][1])
    # The key names its track (camera/track_uid/track_sequence/type): a clip can arrive
    # before its track's events, or outlive a pruned one.
    parts = key.rsplit("/", 3)
    if len(parts) != 4 or not parts[2].isdigit():
        raise ClipLookupError(f"{key!r} is not a track event key (camera/track_uid/seq/type)")
    try:
        parse_track_uid(parts[1])
    except ValueError as exc:
        raise ClipLookupError(str(exc)) from None
    return parts[0], parts[1]


def _camera_of(uid: str, read: Read, ph: str) -> str | None:
    cams = read(f"SELECT DISTINCT camera_id FROM clip_tracks WHERE track_uid = {ph}", (uid,))
    if len(cams) > 1:
        names = ", ".join(sorted(str(c[0]) for c in cams))
        raise ClipLookupError(f"track {uid} is on several cameras ({names}): name one")
    return str(cams[0][0]) if cams else None


def find(q: ClipQuery, read: Read, ph: str) -> ClipRow | None:
    """The clip the query names (a track's first, by start), None when none is stored;
    ClipLookupError for a request that names no single clip or track."""
    if sum((bool(q.clip_id), bool(q.event_key), bool(q.track_uid))) != 1:
        raise ClipLookupError("name exactly one of clip_id, event_key, track_uid")
    if q.clip_id:
        rows = read(f"SELECT {_READ} FROM clips c WHERE c.clip_id = {ph}", (q.clip_id,))
        return from_row(rows[0]) if rows else None
    if q.event_key:
        camera, uid = _track_of_key(q.event_key, read, ph)
    else:
        try:
            parse_track_uid(q.track_uid)
        except ValueError as exc:
            raise ClipLookupError(str(exc)) from None
        uid = q.track_uid
        found = q.camera_id or _camera_of(uid, read, ph)
        if found is None:
            return None
        camera = found
    rows = read(
        f"SELECT {_READ} FROM clips c JOIN clip_tracks t ON t.clip_id = c.clip_id "
        f"WHERE t.camera_id = {ph} AND t.track_uid = {ph} ORDER BY c.start_ns, c.clip_id "
        "LIMIT 1",
        (camera, uid),
    )
    return from_row(rows[0]) if rows else None


def pieces_sql(ph: str) -> str:
    """Stored chunks of a clip that end past an offset, in order; parameters: clip_id,
    offset, how many."""
    return (
        f"SELECT byte_offset, data FROM clip_chunks WHERE clip_id = {ph} "
        f"AND byte_offset + size > {ph} ORDER BY byte_offset LIMIT {ph}"
    )


def delete_sql(ph: str) -> tuple[str, str]:
    """Statements deleting one clip's chunks and row (parameter: clip_id)."""
    return (
        f"DELETE FROM clip_chunks WHERE clip_id = {ph}",
        f"DELETE FROM clips WHERE clip_id = {ph}",
    )
