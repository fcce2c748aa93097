"""Which events a sink takes: the config's filter, and a cooldown so one lingering object
is not a flood (Roboflow Inference's webhook sink made a 1 s cooldown its default after
deployments sent several events a second)."""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable

from strata.shared.config.sinks import SinkFilterConfig

from .events import OutboxEvent


class EventFilter:
    """The config's filter: every non-empty list must let the event through."""

    def __init__(self, cfg: SinkFilterConfig) -> None:
        self.cameras = frozenset(cfg.cameras)
        self.labels = frozenset(cfg.labels)
        self.zones = frozenset(cfg.zones)
        self.rules = frozenset(cfg.rules)
        self.types = frozenset(cfg.types)

    def __call__(self, ev: OutboxEvent) -> bool:
        """Whether the sink gets `ev`."""
        return (
            (not self.cameras or ev.camera_id in self.cameras)
            and (not self.labels or ev.label in self.labels)
            and (not self.types or ev.type in self.types)
            and (not self.rules or ev.rule in self.rules)
            and (not self.zones or not self.zones.isdisjoint(ev.zones()))
        )


class Cooldown:
    """Per (camera, track, rule, type): at most one event per `window_s`, and never the same
    idempotency key twice in a row of `remember` keys. An untracked event has no cooldown;
    new and end come once per track, so only updates and repeated rule events are held."""

    def __init__(
        self,
        window_s: float,
        remember: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.window_s = window_s
        self.remember = remember
        self.clock = clock
        self._last: OrderedDict[tuple[str, str, str, str], float] = OrderedDict()
        self._keys: OrderedDict[str, None] = OrderedDict()

    def check(self, ev: OutboxEvent) -> str | None:
        """None: send it; else why not ("duplicate", "cooldown"). Does not record it."""
        if ev.key in self._keys:
            return "duplicate"
        if self.window_s > 0 and ev.track:
            t = self._last.get((ev.camera_id, ev.track, ev.rule, ev.type))
            if t is not None and self.clock() - t < self.window_s:
                return "cooldown"
        return None

    def sent(self, ev: OutboxEvent) -> None:
        """Record a delivered event."""
        self._keys[ev.key] = None
        if len(self._keys) > self.remember:
            self._keys.popitem(last=False)
        if ev.track:
            k = (ev.camera_id, ev.track, ev.rule, ev.type)
            self._last[k] = self.clock()
            self._last.move_to_end(k)
            if len(self._last) > self.remember:
                self._last.popitem(last=False)
