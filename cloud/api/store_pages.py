"""The paging loop of QueryEvents and QueryTrackEvents: the store read a page at a time on
the executor, each from where the last ended, so a large answer never sits whole in memory."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Executor
from typing import Any, TypeVar

import grpc

from ..store.event_store import StoreError
from .drops import Drops

RowT = TypeVar("RowT")
KeyT = TypeVar("KeyT")


async def store_pages(
    fetch: Callable[[KeyT | None], tuple[list[RowT], KeyT | None]],
    after: KeyT | None,
    executor: Executor,
    method: str,
    drops: Drops,
    context: grpc.aio.ServicerContext[Any, Any],
) -> AsyncIterator[tuple[list[RowT], KeyT | None]]:
    """(rows, key of the next page) for each page `fetch` reads after `after`, until the
    key is None; a store error ends the call UNAVAILABLE, counted under `method`."""
    loop = asyncio.get_running_loop()
    while True:
        try:
            rows, after = await loop.run_in_executor(executor, fetch, after)
        except StoreError as exc:
            drops(method, "store_error", str(exc))
            await context.abort(grpc.StatusCode.UNAVAILABLE, f"event store: {exc}")
        yield rows, after
        if after is None:
            return
