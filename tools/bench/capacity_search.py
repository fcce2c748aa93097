"""The capacity search: the most cameras a trial carries, with a stopping rule.

Doubling from `start` cameras (one unless told) until a trial fails (or `limit` is
reached), then bisection between the last count carried and the first that failed. It
assumes more cameras never do better (monotonic); a noisy machine can break that, and the
trials are all kept so a reader sees it. It stops on the first of:

1. `exact`: the bracket closed (the most carried is one under the least that failed);
2. `limit`: `limit` cameras were carried (the figure is a lower bound);
3. `none`: one camera was not carried (the figure is 0);
4. `trials`: `max_trials` trials were run (the figure is the bracket's lower end);
5. `budget`: `budget_s` seconds were spent before a trial could start (the same).

A trial costs about the clip's length, so the budget is checked before each trial, never
inside one: a search runs at most one trial past its budget.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

STOPS = ("exact", "limit", "none", "trials", "budget")


class Outcome(Protocol):
    """What the search reads of a trial."""

    @property
    def cameras(self) -> int: ...

    @property
    def carried(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class SearchRules:
    """Bounds of one search: cameras, trials and seconds."""

    limit: int = 128
    max_trials: int = 12
    budget_s: float = 900.0
    # The doubling's first count: a long clip's trial takes minutes, and the small counts
    # a site is known to carry tell nothing.
    start: int = 1

    def __post_init__(self) -> None:
        if self.limit < 1 or self.max_trials < 1 or self.budget_s <= 0:
            raise ValueError(
                f"capacity search: limit ({self.limit}) and max_trials ({self.max_trials}) "
                f"must be at least 1 and budget_s ({self.budget_s}) positive"
            )
        if not 1 <= self.start <= self.limit:
            raise ValueError(
                f"capacity search: start ({self.start}) must be from 1 to limit ({self.limit})"
            )


T = TypeVar("T", bound=Outcome)


@dataclass(slots=True)
class SearchResult(Generic[T]):
    """The most cameras carried, the bracket it was found in, and why the search stopped.

    `most` is exact only when `stopped` is "exact" (or "none"); otherwise the truth lies
    in [most, least_failed - 1] (least_failed None: not bounded above by a trial)."""

    most: int
    least_failed: int | None
    stopped: str
    trials: list[T] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def exact(self) -> bool:
        """The figure is the most cameras carried, not a lower bound."""
        return self.stopped in ("exact", "none")


def most_cameras(
    trial: Callable[[int], T],
    rules: SearchRules = SearchRules(),
    clock: Callable[[], float] = time.monotonic,
) -> SearchResult[T]:
    """Run trials of N cameras (doubling, then bisection) until a stopping rule holds."""
    start = clock()
    out: SearchResult[T] = SearchResult(0, None, "exact")

    def may_run() -> str:
        if len(out.trials) >= rules.max_trials:
            return "trials"
        if clock() - start >= rules.budget_s:
            return "budget"
        return ""

    def run(n: int) -> bool:
        result = trial(n)
        out.trials.append(result)
        if result.carried:
            out.most = max(out.most, n)
        else:
            out.least_failed = n if out.least_failed is None else min(out.least_failed, n)
        return result.carried

    stop = ""
    n = rules.start
    # Doubling: start, 2 start, 4 start, ... capped at the limit.
    while True:
        stop = may_run()
        if stop:
            break
        if not run(n):
            break
        if n >= rules.limit:
            stop = "limit"
            break
        n = min(n * 2, rules.limit)
    # Bisection inside (most, least_failed).
    while not stop and out.least_failed is not None and out.least_failed - out.most > 1:
        stop = may_run()
        if stop:
            break
        run((out.most + out.least_failed) // 2)
    if not stop:
        stop = "none" if out.most == 0 else "exact"
    out.stopped = stop
    out.seconds = clock() - start
    return out
