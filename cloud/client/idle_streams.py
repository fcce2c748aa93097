"""Opens N idle WatchEvents and M idle Uplink streams to a cloud and holds them until killed.

Run as its own process by the idle-stream test and the cloud bench, so the streams' client
side does not share a GIL with the calls being timed:
`python -m strata.cloud.client.idle_streams ADDRESS N M` prints `ready` once every stream is open.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator

import grpc
from strata.shared.contracts import analytics_pb2, analytics_pb2_grpc, current_version


async def _never() -> AsyncIterator[analytics_pb2.CropBatch]:
    await asyncio.Event().wait()
    yield analytics_pb2.CropBatch()  # pragma: no cover - never reached


async def main(address: str, watch: int, uplink: int) -> None:
    # Several connections, as many clients would have; each below the per-connection limit.
    channels = [grpc.aio.insecure_channel(address) for _ in range(4)]
    calls = []
    for i in range(watch):
        stub = analytics_pb2_grpc.AnalyticsStub(channels[i % 4])  # type: ignore[no-untyped-call]
        call = stub.WatchEvents(analytics_pb2.WatchEventsRequest(version=current_version()))
        calls.append(call)
    for i in range(uplink):
        stub = analytics_pb2_grpc.AnalyticsStub(channels[i % 4])  # type: ignore[no-untyped-call]
        calls.append(stub.Uplink(_never()))
    # A WatchEvents stream sends its header once subscribed; an Uplink stream once it runs.
    await asyncio.gather(*(c.wait_for_connection() for c in calls))
    await asyncio.gather(*(c.initial_metadata() for c in calls[:watch]))
    print("ready", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
