"""Search by example leaves out tracks that do not look alike (cloud.identity.min_similarity;
issue 42): a real SQLite store, a lookalike, a stranger and an opposite of the example."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from identity_helpers import life, people, seen
from outbox_helpers import started_store
from strata.cloud.identity.service import Searcher
from strata.cloud.metrics import CloudMetrics
from strata.cloud.store.event_store import EventStore
from strata.shared.config.cloud import DEFAULT_MIN_SIMILARITY, CloudIdentityConfig


@pytest.fixture
def stored(tmp_path: Path) -> Iterator[tuple[EventStore, dict[str, str]]]:
    """Four tracks: `me`, `alike` (the same person, cosine about 0.93), `stranger`
    (another person, about 0) and `opposite` (the negated embedding, about -0.93)."""
    for s, _cfg in started_store(tmp_path):
        p = people(2, seed=5)
        vectors = {
            "me": seen(p[0], 0.1, 1),
            "alike": seen(p[0], 0.4, 2),
            "stranger": seen(p[1], 0.1, 3),
            "opposite": (-seen(p[0], 0.4, 4)).astype(np.float32),
        }
        uids = {}
        for i, (name, v) in enumerate(vectors.items()):
            events = life("cam", (10**18 + i, i + 1), 2 * i + 1, 100.0 + i, 105.0 + i, v)
            for ev in events:
                s.submit_track(ev).result(20)
            uids[name] = events[0].track_uid
        yield s, uids


def test_the_default_minimum_is_documented_and_in_range() -> None:
    assert CloudIdentityConfig().min_similarity == DEFAULT_MIN_SIMILARITY == 0.5
    assert "min_similarity" in (Path(__file__).parents[2] / "docs" / "config.md").read_text()


def test_a_search_without_a_minimum_leaves_out_tracks_that_do_not_look_alike(
    stored: tuple[EventStore, dict[str, str]],
) -> None:
    s, uid = stored
    names = {v: k for k, v in uid.items()}
    found, searched = Searcher(s, CloudMetrics()).search("cam", uid["me"], 10, 0.0, False)
    assert searched == 4
    assert [names[f.row.track_uid] for f in found] == ["alike"]
    assert all(f.similarity >= DEFAULT_MIN_SIMILARITY for f in found)


def test_the_request_minimum_wins_and_minus_one_lists_every_track(
    stored: tuple[EventStore, dict[str, str]],
) -> None:
    s, uid = stored
    names = {v: k for k, v in uid.items()}
    searcher = Searcher(s, CloudMetrics())
    every, _ = searcher.search("cam", uid["me"], 10, -1.0, False)
    assert [names[f.row.track_uid] for f in every] == ["alike", "stranger", "opposite"]
    assert every[-1].similarity < -0.5
    strict, _ = searcher.search("cam", uid["me"], 10, 0.99, False)
    assert strict == []
    # The cloud's own minimum (cloud.identity.min_similarity) when the request names none.
    loose = Searcher(s, CloudMetrics(), min_similarity=-0.2)
    found, _ = loose.search("cam", uid["me"], 10, 0.0, False)
    assert [names[f.row.track_uid] for f in found] == ["alike", "stranger"]
