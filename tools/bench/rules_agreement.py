"""How far one run's rule results agree with the reference's: counts and matched events.

A rule result is one `line_crossed` (per line and direction), `zone_entered` (per zone) or
`dwell_exceeded` (per dwell rule) event, at the clip time of the frame that emitted it.
Two measures, per rule key and over all of them:

- **count agreement**: 1 - |count - reference| / max(reference, 1), floored at 0 (over all
  keys: the absolute errors summed, so a surplus on one line never hides a shortfall on
  another);
- **matched-event F1**: an event matches a reference event of the same key at most
  `tolerance_s` apart, each used once (the most matches: in one dimension the greedy walk
  over both sorted lists finds them); precision over our events, recall over the
  reference's.

Track ids are not compared: two runs' trackers number objects independently.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from strata.edge.rules.events import (
    DWELL_EXCEEDED,
    LINE_CROSSED,
    ZONE_ENTERED,
    direction_name,
    type_name,
)
from strata.shared.contracts import events_pb2

# The rule results compared (zone_left is the mirror of zone_entered: counted in the
# events per minute, not compared).
RULE_TYPES = (LINE_CROSSED, ZONE_ENTERED, DWELL_EXCEEDED)


@dataclass(frozen=True, slots=True, order=True)
class RuleKey:
    """What a result counts towards: `kind` (event type name), the rule's geometry name
    (line, zone or dwell rule) and the direction (crossings only)."""

    kind: str
    name: str
    direction: str = ""

    def __str__(self) -> str:
        return " ".join(p for p in (self.kind, self.name, self.direction) if p)


@dataclass(frozen=True, slots=True)
class RuleHit:
    """One rule result: its key, when (seconds into the clip) and whether observed."""

    key: RuleKey
    time_s: float
    observed: bool


def rule_hit(event: events_pb2.TrackEvent, time_s: float) -> RuleHit | None:
    """The rule result an event is (None for lifecycle and other events)."""
    kind = event.type
    if kind == LINE_CROSSED:
        key = RuleKey(type_name(kind), event.line, direction_name(event.direction))
    elif kind == ZONE_ENTERED:
        key = RuleKey(type_name(kind), event.zone)
    elif kind == DWELL_EXCEEDED:
        key = RuleKey(type_name(kind), event.rule)
    else:
        return None
    return RuleHit(key, time_s, event.observed)


def count_agreement(count: int, reference: int) -> float:
    """1 - |count - reference| / max(reference, 1), floored at 0."""
    return max(0.0, 1.0 - abs(count - reference) / max(reference, 1))


def matched(ours: Sequence[float], reference: Sequence[float], tolerance_s: float) -> int:
    """How many times pair up, each at most once, within `tolerance_s` (the most there are)."""
    a, b = sorted(ours), sorted(reference)
    i = j = n = 0
    while i < len(a) and j < len(b):
        if abs(a[i] - b[j]) <= tolerance_s:
            n, i, j = n + 1, i + 1, j + 1
        elif a[i] < b[j]:
            i += 1
        else:
            j += 1
    return n


@dataclass(frozen=True, slots=True)
class KeyAgreement:
    """One rule key: counts and matched events against the reference."""

    key: RuleKey
    count: int
    reference: int
    matched: int

    @property
    def count_agreement(self) -> float:
        return count_agreement(self.count, self.reference)

    @property
    def f1(self) -> float:
        """Matched-event F1 (1 when neither run has an event of this key)."""
        return _f1(self.matched, self.count, self.reference)


def _f1(hits: int, ours: int, reference: int) -> float:
    if ours == 0 and reference == 0:
        return 1.0
    return 2 * hits / (ours + reference)


@dataclass(frozen=True, slots=True)
class RulesAgreement:
    """Every rule key of either run, and the totals."""

    keys: tuple[KeyAgreement, ...]
    tolerance_s: float

    @property
    def count_agreement(self) -> float:
        """1 - sum |count - reference| / max(sum reference, 1), floored at 0."""
        err = sum(abs(k.count - k.reference) for k in self.keys)
        return max(0.0, 1.0 - err / max(sum(k.reference for k in self.keys), 1))

    @property
    def worst_count_agreement(self) -> float:
        """The lowest count agreement of any key the reference has (1 when it has none)."""
        return min((k.count_agreement for k in self.keys if k.reference), default=1.0)

    @property
    def f1(self) -> float:
        """Matched-event F1 over every key."""
        return _f1(
            sum(k.matched for k in self.keys),
            sum(k.count for k in self.keys),
            sum(k.reference for k in self.keys),
        )


def compare(
    ours: Iterable[RuleHit], reference: Iterable[RuleHit], tolerance_s: float
) -> RulesAgreement:
    """Our rule results against the reference's, per key (sorted) and in total."""
    mine: dict[RuleKey, list[float]] = defaultdict(list)
    ref: dict[RuleKey, list[float]] = defaultdict(list)
    for h in ours:
        mine[h.key].append(h.time_s)
    for h in reference:
        ref[h.key].append(h.time_s)
    keys = sorted(set(mine) | set(ref))
    return RulesAgreement(
        tuple(
            KeyAgreement(k, len(mine[k]), len(ref[k]), matched(mine[k], ref[k], tolerance_s))
            for k in keys
        ),
        tolerance_s,
    )
