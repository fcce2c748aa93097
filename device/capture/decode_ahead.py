"""Decoding a few frames ahead of the camera thread, where the host has a core to spare.

A camera thread decodes a frame, then scores, decides, scales and encodes it in Python;
while it does, the decoder (which runs without the GIL, on FFmpeg's threads) waits. With
fewer cameras than cores that wait is the agent's shortfall against decode only: vtest
decodes at 705 frames/s and the agent ran at 424 on 2 cores, 0.60 of it, though its CPU
time per frame is 0.72 of it (docs/device.md, "A frame's path"). Here the source's generator
runs on a thread of its own, `depth` decoded frames ahead of the camera thread, so the
two overlap.

Invariant: the camera thread sees exactly the frames, errors and end the source's
generator gives, in its order; at most `depth` decoded frames wait between them (the
decoder blocks on a full queue, so a slow camera thread slows the decoder, never grows
memory). Closing stops the decoding thread and closes the generator on it.

With as many cameras as cores, every core already decodes or handles some camera's
frames; a thread more per camera only adds hand-offs, so `device.source.decode_ahead:
auto` turns it on only below that (strata.device.agent decides).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from typing import Generic, TypeVar

T = TypeVar("T")

_POLL_S = 0.1  # how often a blocked side looks at the stop flag


class _End:
    """The generator ended (`error` None) or raised `error`."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException | None) -> None:
        self.error = error


class DecodeAhead(Generic[T]):
    """Iterates `frames` on a thread named `name`, up to `depth` items ahead."""

    def __init__(self, frames: Iterator[T], depth: int = 2, name: str = "decode") -> None:
        if depth < 1:
            raise ValueError(f"decode-ahead depth must be at least 1, got {depth}")
        self._frames = frames
        self._q: queue.Queue[T | _End] = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._done = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def __iter__(self) -> DecodeAhead[T]:
        return self

    def __next__(self) -> T:
        if self._done:
            raise StopIteration
        item = self._q.get()
        if isinstance(item, _End):
            self._done = True
            self._thread.join()
            if item.error is not None:
                raise item.error
            raise StopIteration
        return item

    def close(self) -> None:
        """Stop decoding ahead (the camera thread stops reading): the thread ends, the
        generator is closed on it, the frames waiting are let go."""
        self._stop.set()
        while self._thread.is_alive():
            try:  # make room for a put that is waiting
                self._q.get(timeout=_POLL_S)
            except queue.Empty:
                pass
        self._done = True

    def __enter__(self) -> DecodeAhead[T]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _run(self) -> None:
        frames = self._frames
        end = _End(None)
        try:
            for item in frames:
                if not self._put(item):
                    return
        except BaseException as exc:  # handed to the camera thread, raised there
            end = _End(exc)
        finally:
            close = getattr(frames, "close", None)
            if close is not None:
                close()
        self._put(end)

    def _put(self, item: T | _End) -> bool:
        """Queue `item`, waiting for room; False once stopped."""
        while not self._stop.is_set():
            try:
                self._q.put(item, timeout=_POLL_S)
                return True
            except queue.Full:
                continue
        return False
