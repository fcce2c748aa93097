"""A stored event clip over HTTP for the console's <video>: video/mp4, one byte range
(206) or all of it (200), an ETag that changes as the clip grows, cached while complete.
The bytes stream from the store in bounded pieces (clip_reader), never whole."""

from __future__ import annotations

import logging
import zlib
from collections.abc import AsyncIterator
from concurrent.futures import Executor
from dataclasses import dataclass

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from strata.shared.config.cloud import CloudClipsConfig

from ..store.clip_reader import ClipGoneError, ClipSpan, clip_bytes
from ..store.clip_rows import ClipRow
from ..store.event_store import EventStore, StoreError
from .byte_range import ByteRange, RangeNotSatisfiableError, parse_range

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ClipSource:
    """Where clip bytes come from: the store, the threads that read it, the clips' config."""

    store: EventStore
    executor: Executor
    cfg: CloudClipsConfig


def etag(found: ClipRow) -> str:
    """Names these bytes: the clip, how much of it is committed, whether it is final."""
    crc = zlib.crc32(found.info.clip_id.encode())
    return f'"{crc:08x}-{found.committed_bytes:x}-{int(found.final)}"'


async def _body(src: ClipSource, clip_id: str, span: ByteRange) -> AsyncIterator[bytes]:
    piece = ClipSpan(clip_id, span.start, span.end, src.cfg.serve_chunk_bytes)
    try:
        async for _, data in clip_bytes(src.store, src.executor, piece):
            yield data
    except (ClipGoneError, StoreError) as exc:
        # The status line has gone out: the short body is what the browser sees.
        log.warning("console: clip %s ended early: %s", clip_id, exc)


def clip_response(request: Request, found: ClipRow, src: ClipSource) -> Response:
    """The answer to a GET of the clip, honouring Range, If-Range and If-None-Match."""
    size, tag = found.committed_bytes, etag(found)
    cache = f"private, max-age={src.cfg.max_age_s}" if found.final else "private, no-cache"
    headers = {"Accept-Ranges": "bytes", "ETag": tag, "Cache-Control": cache}
    if request.headers.get("if-none-match") == tag:
        return Response(status_code=304, headers=headers)
    try:
        rng = parse_range(request.headers.get("range", ""), size)
    except RangeNotSatisfiableError:
        return Response(status_code=416, headers={**headers, "Content-Range": f"bytes */{size}"})
    if rng is not None and request.headers.get("if-range", tag) != tag:
        rng = None  # the clip changed since the client's copy: all of it
    span = rng or ByteRange(0, size, size)
    headers["Content-Length"] = str(span.end - span.start)
    if rng is not None:
        headers["Content-Range"] = rng.content_range
    return StreamingResponse(
        _body(src, found.info.clip_id, span),
        status_code=206 if rng is not None else 200,
        media_type="video/mp4",
        headers=headers,
    )
