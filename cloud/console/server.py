"""`ConsoleServer`: uvicorn serving the console on the gRPC server's event loop.

The same loop, so live pages subscribe to the WatchHub exactly as WatchEvents streams do
(the hub hands commits to one loop). The socket is bound here, before uvicorn runs, so a
port in use is a clear error at start and port 0 reports the port it got.
"""

from __future__ import annotations

import asyncio
import logging
import socket

import uvicorn

from ..security import SecurityError, split_listen
from .app import Console
from .reads import ConsoleParts
from .security import ConsoleSecurity, Gate

log = logging.getLogger(__name__)

STOP_GRACE_S = 2.0


def bind(listen: str) -> socket.socket:
    """A listening TCP socket on HOST:PORT (IPv4 or IPv6). Raises SecurityError."""
    host, port = split_listen(listen)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise SecurityError(f"console cannot bind {listen}: {exc.strerror}") from exc
    sock.setblocking(False)
    return sock


class ConsoleServer:
    """The console's HTTP(S) server; start() and stop() run on the serving loop."""

    def __init__(self, parts: ConsoleParts, security: ConsoleSecurity) -> None:
        self.security = security
        self.console = Console(parts, Gate(security.token, security.session_s), security.tls)
        self._sock: socket.socket | None = None
        self._server: uvicorn.Server | None = None
        self._task: asyncio.Task[None] | None = None
        self.port = 0
        self.url = ""

    async def start(self) -> int:
        """Bind and serve (on the running loop); returns the port."""
        sock = bind(self.security.listen)
        self._sock = sock
        self.port = int(sock.getsockname()[1])
        config = uvicorn.Config(
            self.console.asgi,
            log_level="warning",
            access_log=False,
            lifespan="off",
            timeout_graceful_shutdown=int(STOP_GRACE_S),
            proxy_headers=False,
            server_header=False,
        )
        if self.security.ssl_context is not None:
            # uvicorn builds its SSL context from files; the checked one is used instead.
            config.load()
            config.ssl = self.security.ssl_context
        self._server = uvicorn.Server(config)
        self._task = asyncio.get_running_loop().create_task(self._server.serve(sockets=[sock]))
        while not self._server.started:
            if self._task.done():
                self._task.result()  # raises what stopped it
                raise SecurityError("console stopped while starting")
            await asyncio.sleep(0.01)
        host, _ = split_listen(self.security.listen)
        scheme = "https" if self.security.tls else "http"
        shown = f"[{host}]" if ":" in host else host
        self.url = f"{scheme}://{shown}:{self.port}"
        log.info("console on %s (%s)", self.url, "token" if security_on(self) else "open")
        return self.port

    async def stop(self) -> None:
        """End live streams, let requests in flight finish, close the socket."""
        self.console.closing.set()
        if self._server is not None and self._task is not None:
            self._server.should_exit = True
            try:
                await asyncio.wait_for(self._task, STOP_GRACE_S + 5)
            except (TimeoutError, asyncio.CancelledError):
                self._task.cancel()
        if self._sock is not None:
            self._sock.close()


def security_on(server: ConsoleServer) -> bool:
    """Whether the console asks for a token."""
    return server.security.token is not None
