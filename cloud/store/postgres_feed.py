"""The PostgreSQL event feed: every replica's writer NOTIFYs the ids it committed, in the same
transaction (PostgreSQL delivers a notification only on commit, in commit order); each
replica LISTENs on its own connection and hears the ids of all of them. Crop events and track
events have their own id spaces, so each has its own channel."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import psycopg

log = logging.getLogger(__name__)

CHANNEL = "strata_events"
# Track events' stored ids (schema 4); a replica of an older build does not listen to it.
TRACK_CHANNEL = "strata_track_events"
# A NOTIFY payload must stay under 8000 bytes; ids are split over several notifications.
_MAX_PAYLOAD = 7000
_RETRY_S = 1.0
# Notice a dead server or a silent network partition within about 20 s.
_KEEPALIVE: dict[str, Any] = {
    "keepalives": 1,
    "keepalives_idle": 10,
    "keepalives_interval": 5,
    "keepalives_count": 2,
}


def payloads(ids: list[int]) -> list[str]:
    """Comma-separated ids, split so each payload fits a NOTIFY."""
    out: list[str] = []
    part: list[str] = []
    size = 0
    for i in ids:
        s = str(i)
        if part and size + len(s) + 1 > _MAX_PAYLOAD:
            out.append(",".join(part))
            part, size = [], 0
        part.append(s)
        size += len(s) + 1
    if part:
        out.append(",".join(part))
    return out


def parse_payload(payload: str) -> list[int]:
    """The ids of one payload; ValueError when it is not ours."""
    return [int(p) for p in payload.split(",") if p]


class EventFeed:
    """A thread that LISTENs for committed ids and hands each channel's to its handler;
    reconnects when the connection breaks, telling `on_lost` (events may have been missed)
    and `on_back`."""

    def __init__(
        self,
        url: str,
        connect_timeout_s: int,
        handlers: dict[str, Callable[[list[int]], None]],
        on_lost: Callable[[str], None],
        on_back: Callable[[], None],
    ) -> None:
        self.url = url
        self.connect_timeout_s = connect_timeout_s
        self.handlers = dict(handlers)
        self.on_lost = on_lost
        self.on_back = on_back
        self._stop = threading.Event()
        self._conn: psycopg.Connection[Any] | None = None
        self._thread = threading.Thread(target=self._run, name="event-feed", daemon=True)

    def _listen(self) -> psycopg.Connection[Any]:
        conn = psycopg.connect(
            self.url,
            autocommit=True,
            connect_timeout=self.connect_timeout_s,
            application_name="strata-cloud-feed",
            **_KEEPALIVE,
        )
        for channel in self.handlers:
            conn.execute(f"LISTEN {channel}")
        return conn

    def start(self) -> None:
        """LISTEN now (raises psycopg.Error when it cannot), then follow in a thread."""
        self._conn = self._listen()
        self._thread.start()

    def close(self) -> None:
        """Stop following; the thread closes its connection."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5.0)
        elif self._conn is not None:
            self._conn.close()

    def _run(self) -> None:
        conn = self._conn
        failing = False
        while not self._stop.is_set():
            if conn is None:
                try:
                    conn = self._listen()
                except psycopg.Error as exc:
                    if not failing:
                        log.warning("event feed: cannot reconnect yet: %s", str(exc).strip())
                        failing = True
                    self._stop.wait(_RETRY_S)
                    continue
                failing = False
                log.info("event feed: listening again")
                self.on_back()
            try:
                # Notifications that arrive between two calls wait in psycopg's backlog.
                for note in conn.notifies(timeout=0.5):
                    self._deliver(note.channel, note.payload)
            except psycopg.Error as exc:
                reason = f"event feed connection lost: {str(exc).strip()}"
                log.warning("%s; reconnecting", reason)
                self.on_lost(reason)
                conn.close()
                conn = None
        if conn is not None:
            conn.close()

    def _deliver(self, channel: str, payload: str) -> None:
        handler = self.handlers.get(channel)
        try:
            ids = parse_payload(payload)
        except ValueError:
            handler = None
        if handler is None:
            log.warning("event feed: ignoring a foreign payload on %s: %.80r", channel, payload)
            return
        handler(ids)
