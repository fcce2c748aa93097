"""The protocol-version check every non-streaming request of the Analytics service starts
with (Uplink checks each batch: service._start_batch)."""

from __future__ import annotations

from typing import Any

import grpc
from strata.shared.contracts import ProtocolVersionError, check_version, common_pb2

from .drops import Drops


async def require_version(
    version: common_pb2.ProtocolVersion,
    method: str,
    drops: Drops,
    context: grpc.aio.ServicerContext[Any, Any],
) -> None:
    """Return when this server speaks the request's `version`; else the call ends
    FAILED_PRECONDITION with the reason, counted and logged under `method`."""
    try:
        check_version(version)
    except ProtocolVersionError as exc:
        drops(method, "protocol_version", str(exc))
        await context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(exc))
