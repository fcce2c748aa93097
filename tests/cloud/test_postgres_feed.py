"""cloud/store/postgres_feed.py: committed ids split over NOTIFY payloads and read back."""

from __future__ import annotations

import pytest
from strata.cloud.store.postgres_feed import parse_payload, payloads


def test_ids_split_under_the_notify_limit_and_come_back_in_order() -> None:
    ids = list(range(10**12, 10**12 + 3000))
    parts = payloads(ids)
    assert len(parts) > 1
    assert all(len(p.encode()) < 8000 for p in parts)  # PostgreSQL's NOTIFY limit
    assert [i for p in parts for i in parse_payload(p)] == ids


def test_no_ids_no_payload_and_a_foreign_payload_is_refused() -> None:
    assert payloads([]) == []
    assert payloads([7]) == ["7"]
    with pytest.raises(ValueError):
        parse_payload("hello")
