"""`strata bench identity-search` at a small size: both figures (the index alone, beside the
bare product, and the endpoint's whole search over a SQLite store) come out, each search
finding the example's own row first."""

from __future__ import annotations

from strata.tools.bench.identity_search import Setup, measure


def test_the_search_benchmark_measures_the_index_and_the_store() -> None:
    got = measure(Setup(tracks=600, dim=64, queries=20, k=5, cameras=3))
    assert got["tracks"] == 600 and got["index"]["matrix_mb"] > 0
    assert got["index"]["p99_ms"] >= got["index"]["p50_ms"] > 0
    assert got["index"]["bare_matvec"]["p50_ms"] > 0
    assert got["searcher"]["p99_ms"] > 0 and got["search_p99_ms"] == got["searcher"]["p99_ms"]
