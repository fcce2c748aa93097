"""HTTP Range requests on a stored clip (RFC 9110 section 14): one `bytes=` range, which a
browser's <video> asks for to seek and to read the end of an MP4 first."""

from __future__ import annotations

from dataclasses import dataclass


class RangeNotSatisfiableError(ValueError):
    """A range wholly past the end (416)."""


@dataclass(frozen=True, slots=True)
class ByteRange:
    """Bytes [start, end) of a resource of `size` bytes."""

    start: int
    end: int
    size: int

    @property
    def content_range(self) -> str:
        """The Content-Range header of a 206 answer."""
        return f"bytes {self.start}-{self.end - 1}/{self.size}"


def parse_range(header: str, size: int) -> ByteRange | None:
    """The one range `header` asks of `size` bytes; None to send it all (no header, several
    ranges or one this server does not understand, which RFC 9110 lets it ignore).
    Raises RangeNotSatisfiableError."""
    unit, _, spec = header.strip().partition("=")
    if unit.strip().lower() != "bytes" or "," in spec:
        return None
    first, dash, last = spec.strip().partition("-")
    if not dash or not (first.isdigit() or last.isdigit()):
        return None
    if not first:  # the last N bytes
        n = int(last)
        if n == 0 or size == 0:
            raise RangeNotSatisfiableError(f"bytes=-0 of {size}")
        return ByteRange(max(0, size - n), size, size)
    start = int(first)
    end = min(size, int(last) + 1) if last.isdigit() else size
    if start >= size:
        raise RangeNotSatisfiableError(f"range starts at {start}; the clip has {size} bytes")
    if end <= start:
        return None  # last < first: not a valid range, ignored
    return ByteRange(start, end, size)
