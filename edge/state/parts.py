"""The node's checkpoint parts (edge/state/checkpoint.py, `CheckpointPart`): one per
stateful stage, each restoring itself at start and, for one camera moved here from a
failed peer, at takeover (`MovablePart`, edge/state/takeover.py). The rules stage
(strata.edge.rules.stage.RulesStage, part `rules`) is its own part: its engine's lock
guards the snapshot."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Protocol

from prometheus_client import Counter
from strata.edge.flow.ledger import DeliveryLedger, SettledStream
from strata.edge.state.checkpoint_file import (
    CounterCheckpoint,
    StreamCheckpoint,
    TrackerCheckpoint,
    UplinkCheckpoint,
    counter_values,
    restore_counters,
)
from strata.edge.tracking.answers import Answers
from strata.edge.uplink.stream import Uplink
from strata.shared.config.edge import UplinkConfig

log = logging.getLogger(__name__)


class SessionRestore(Protocol):
    """Ingest's per-camera sessions (strata.edge.ingest.intake.Ingest.restore)."""

    def restore(self, cameras: dict[str, list[tuple[int, int]]]) -> int: ...


class SettledPart:
    """Delivery's settled frames (the ledger), and ingest's sessions derived from them."""

    name = "streams"

    def __init__(self, ledger: DeliveryLedger, sessions: SessionRestore) -> None:
        self.ledger = ledger
        self.sessions = sessions

    def snapshot(self) -> list[StreamCheckpoint]:
        return [StreamCheckpoint.of(st) for st in self.ledger.snapshot()]

    def restore(self, streams: list[SettledStream]) -> str:
        frames = self.ledger.restore(streams)
        last: dict[str, dict[int, int]] = {}
        for st in streams:
            if st.runs:
                cam = last.setdefault(st.camera_id, {})
                cam[st.session_id] = max(cam.get(st.session_id, 0), st.runs[-1].last)
        cams = self.sessions.restore({c: list(v.items()) for c, v in last.items()})
        return f"{cams} camera(s), {frames} settled frame(s)"

    def take_over(self, streams: list[SettledStream], camera: str, peer: str) -> int:
        return self.ledger.restore(streams)


class TrackersPart:
    """Each camera's tracker, so track ids continue and never repeat."""

    name = "trackers"

    def __init__(self, answers: Answers) -> None:
        self.answers = answers

    def snapshot(self) -> list[TrackerCheckpoint]:
        return [
            TrackerCheckpoint(session_id=session, camera_id=cam, state=state)
            for session, cam, state in self.answers.snapshot()
        ]

    def restore(self, trackers: list[TrackerCheckpoint]) -> int:
        n = 0
        for t in trackers:
            try:
                n += self.answers.restore(t.session_id, t.camera_id, t.state)
            except ValueError as exc:
                log.error(
                    "tracker of camera %s not restored (%s): it starts clean", t.camera_id, exc
                )
        return n

    def take_over(self, trackers: list[TrackerCheckpoint], camera: str, peer: str) -> int:
        return self.restore([t for t in trackers if t.camera_id == camera])


class CountersPart:
    """Every counter of the node's metrics; a moved camera's series go with it."""

    name = "counters"

    def __init__(self, counters: list[Counter]) -> None:
        self.counters = counters

    def snapshot(self) -> list[CounterCheckpoint]:
        return counter_values(self.counters)

    def restore(self, saved: list[CounterCheckpoint]) -> str:
        return f"{restore_counters(self.counters, saved)} series"

    def take_over(self, saved: list[CounterCheckpoint], camera: str, peer: str) -> int:
        return restore_counters(self.counters, saved, {camera})


class UplinkPart:
    """Where the uplink's queue stood (crops and track events). The spool file keeps the
    queue itself; a failed peer's spool (its events first) is drained into this uplink
    once."""

    name = "uplink"

    def __init__(self, uplink: Uplink | None, cfg: UplinkConfig, adopted: Counter) -> None:
        self.uplink = uplink
        self.cfg = cfg
        self.adopted = adopted
        self._drained: set[str] = set()  # peers whose spool was taken over

    def snapshot(self) -> UplinkCheckpoint:
        up = self.uplink
        if up is None:
            return UplinkCheckpoint()
        spool = str(Path(self.cfg.spool_path).resolve()) if self.cfg.spool_path else ""
        return UplinkCheckpoint(
            spool_path=spool,
            spooled=up.spooled,
            buffered=up.buffered,
            events_spooled=up.events_spooled,
            events_buffered=up.events_buffered,
        )

    def restore(self, saved: UplinkCheckpoint) -> str:
        up = self.uplink
        crops, events = (up.spooled, up.events_spooled) if up is not None else (0, 0)
        return (
            f"spool holds {crops} crops and {events} track events ({saved.spooled} and "
            f"{saved.events_spooled} at the checkpoint)"
        )

    def take_over(self, saved: UplinkCheckpoint, camera: str, peer: str) -> int:
        if not saved.spool_path or self.uplink is None or peer in self._drained:
            return 0
        self._drained.add(peer)
        self.uplink.adopt_spool(saved.spool_path, peer, self.adopted)
        return 1
