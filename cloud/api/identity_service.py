"""SearchSimilar on the Analytics service (issue 42): the stored tracks most like one track,
across cameras and time (cloud/identity/service.Searcher over the store's appearances)."""

from __future__ import annotations

import asyncio
from functools import partial
from typing import Any

import grpc
from strata.shared.config.cloud import CloudIdentityConfig
from strata.shared.contracts import analytics_pb2, current_version

from ..identity.service import NoAppearanceError, Searcher, Similar
from ..metrics import CloudMetrics
from ..store.event_store import StoreError
from ..store.track_filter import parse_track_uid
from .request_version import require_version
from .service_parts import ServiceParts

SEARCH = "SearchSimilar"


def similar_track(s: Similar) -> analytics_pb2.SimilarTrack:
    """One result as the contract sends it."""
    r = s.row
    return analytics_pb2.SimilarTrack(
        camera_id=r.camera_id,
        track_uid=r.track_uid,
        similarity=s.similarity,
        first_seen_ns=r.first_seen_ns,
        last_seen_ns=r.last_seen_ns,
        identity_id=r.identity_id,
        label=r.label,
    )


class SimilarTracks:
    """The SearchSimilar handler."""

    def __init__(
        self, cfg: CloudIdentityConfig, parts: ServiceParts, metrics: CloudMetrics
    ) -> None:
        self.cfg = cfg
        self.searcher = parts.searcher or Searcher(parts.store, metrics)
        self.executor = parts.executor
        self.drops = parts.drops
        self.metrics = metrics

    async def search(
        self,
        request: analytics_pb2.SearchSimilarRequest,
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> analytics_pb2.SearchSimilarResponse:
        """The ranked tracks; INVALID_ARGUMENT for a bad name, NOT_FOUND without appearance."""
        await require_version(request.version, SEARCH, self.drops, context)
        status: tuple[grpc.StatusCode, str, str] | None = None
        try:
            if not request.camera_id:
                raise ValueError("camera_id is empty (name the example track's camera)")
            parse_track_uid(request.track_uid)
        except ValueError as exc:
            status = (grpc.StatusCode.INVALID_ARGUMENT, "bad_request", str(exc))
        k = min(request.limit or self.cfg.search_limit, self.cfg.max_search_limit)
        found: tuple[list[Similar], int] = ([], 0)
        if status is None:
            work = partial(
                self.searcher.search,
                request.camera_id,
                request.track_uid,
                k,
                float(request.min_similarity),
                request.other_cameras,
            )
            try:
                found = await asyncio.get_running_loop().run_in_executor(self.executor, work)
            except NoAppearanceError as exc:
                status = (grpc.StatusCode.NOT_FOUND, "not_found", str(exc))
            except StoreError as exc:
                status = (grpc.StatusCode.UNAVAILABLE, "store_error", f"event store: {exc}")
        if status is not None:
            self.drops(SEARCH, status[1], status[2])
            await context.abort(status[0], status[2])
        self.metrics.ok(SEARCH)
        return analytics_pb2.SearchSimilarResponse(
            version=current_version(),
            tracks=[similar_track(s) for s in found[0]],
            searched=found[1],
        )
