"""A request body that is not the method's protobuf gets INVALID_ARGUMENT, not INTERNAL.

gRPC deserializes before the handler runs and answers a parse failure with INTERNAL, which
tells a client the server is broken when it was the request. This interceptor takes the raw
bytes instead and parses them itself, for every service of the (grpc.aio) server.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
from google.protobuf.message import DecodeError

Reject = Callable[[str, str], None]


async def _resolve(result: Any) -> Any:
    return await result if inspect.isawaitable(result) else result


async def _stream_out(result: Any) -> AsyncIterator[Any]:
    """Responses of a server-streaming behaviour: an async generator or a coroutine that writes."""
    if hasattr(result, "__aiter__"):
        async for item in result:
            yield item
    else:
        await _resolve(result)


class ParseGuard(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Moves request parsing into the handler, where a bad body can be answered properly."""

    def __init__(self, on_reject: Reject) -> None:
        self._on_reject = on_reject

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Any]],
        details: grpc.HandlerCallDetails,
    ) -> Any:
        handler = await continuation(details)
        if handler is None or handler.request_deserializer is None:
            return handler
        method = str(details.method)
        deserialize = handler.request_deserializer
        reject = self._on_reject

        async def parse(raw: bytes, ctx: grpc.aio.ServicerContext[Any, Any]) -> Any:
            try:
                return deserialize(raw)
            except (DecodeError, ValueError, TypeError) as exc:
                reason = f"request is not a valid {method} message: {exc}"
                reject(method, reason)
                await ctx.abort(grpc.StatusCode.INVALID_ARGUMENT, reason)

        async def requests(
            raw: AsyncIterator[bytes], ctx: grpc.aio.ServicerContext[Any, Any]
        ) -> AsyncIterator[Any]:
            async for item in raw:
                yield await parse(item, ctx)

        kw = {"request_deserializer": None, "response_serializer": handler.response_serializer}
        if handler.unary_unary is not None:
            behaviour = handler.unary_unary

            async def unary_unary(raw: bytes, ctx: grpc.aio.ServicerContext[Any, Any]) -> Any:
                return await _resolve(behaviour(await parse(raw, ctx), ctx))

            return grpc.unary_unary_rpc_method_handler(unary_unary, **kw)
        if handler.unary_stream is not None:
            behaviour_us = handler.unary_stream

            async def unary_stream(
                raw: bytes, ctx: grpc.aio.ServicerContext[Any, Any]
            ) -> AsyncIterator[Any]:
                async for item in _stream_out(behaviour_us(await parse(raw, ctx), ctx)):
                    yield item

            return grpc.unary_stream_rpc_method_handler(unary_stream, **kw)
        if handler.stream_unary is not None:
            behaviour_su = handler.stream_unary

            async def stream_unary(
                raw: AsyncIterator[bytes], ctx: grpc.aio.ServicerContext[Any, Any]
            ) -> Any:
                return await _resolve(behaviour_su(requests(raw, ctx), ctx))

            return grpc.stream_unary_rpc_method_handler(stream_unary, **kw)
        behaviour_ss = handler.stream_stream

        async def stream_stream(
            raw: AsyncIterator[bytes], ctx: grpc.aio.ServicerContext[Any, Any]
        ) -> AsyncIterator[Any]:
            async for item in _stream_out(behaviour_ss(requests(raw, ctx), ctx)):
                yield item

        return grpc.stream_stream_rpc_method_handler(stream_stream, **kw)
