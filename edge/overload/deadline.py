"""Deadline shedding (`edge.overload.deadline`): a frame taken for a batch that would
finish past the SLA (`scheduler.sla_ms`) after it arrived is shed, final ack SHED with
reason deadline: it could not count as goodput anyway.

The batch about to run is assumed to take as long as the last one did.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from strata.edge.ingest.frames import QueuedFrame
from strata.shared.config.edge import DeadlineConfig
from strata.shared.logs import RateLimitedLog

log = logging.getLogger(__name__)

# What happens to a shed frame (its final ack, counters), given the reason.
ShedHook = Callable[[QueuedFrame, str], None]


class DeadlineShedder:
    """Keeps the frames of a batch that can still finish within the SLA of arrival."""

    def __init__(self, cfg: DeadlineConfig, sla_s: float, shed: ShedHook) -> None:
        self.enabled = cfg.enabled
        self.sla_s = sla_s
        self._shed = shed
        # Seconds the last batch took (the estimate of the next one's).
        self.batch_s = 0.0
        self._log = RateLimitedLog(log)

    def batch_took(self, seconds: float) -> None:
        """A batch finished in `seconds`."""
        self.batch_s = seconds

    def keep(self, frames: list[QueuedFrame]) -> list[QueuedFrame]:
        """The frames that can still make it; the others are shed (counted, logged)."""
        if not self.enabled or not frames:
            return frames
        sla = self.sla_s
        now = time.monotonic()
        budget = sla - self.batch_s
        keep = []
        for f in frames:
            waited = now - f.received
            if waited <= budget:
                keep.append(f)
                continue
            self._shed(
                f,
                f"deadline: waited {waited * 1e3:.0f} ms, a batch takes {self.batch_s * 1e3:.0f}"
                f" ms, SLA {sla * 1e3:.0f} ms",
            )
            self._log.warn(
                "deadline",
                "camera %s #%d shed: waited %.0f ms, would finish past the %.0f ms SLA",
                f.header.camera_id,
                f.header.sequence,
                waited * 1e3,
                sla * 1e3,
            )
        if not keep:
            # Nothing runs, so nothing would measure a batch again: the next one is not
            # judged by this estimate (a slow first batch must not shed every frame after).
            self.batch_s = 0.0
        return keep
