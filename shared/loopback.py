"""Free TCP ports on 127.0.0.1 for daemons a test, a benchmark or the demo starts.

A port picked with `bind(("127.0.0.1", 0))` comes from the kernel's ephemeral range, the
same range every outgoing connection takes its local port from; between the pick and the
daemon's own bind, any connection on the machine (another tier already running, a client
in the test) can take it, and the daemon dies with "Address already in use" (seen in CI:
the demo's cloud metrics port). So ports are picked at random below the ephemeral range,
where no outgoing connection lands, and never twice by one process.
"""

from __future__ import annotations

import random
import socket
import threading
from pathlib import Path

_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_given: set[int] = set()
_lock = threading.Lock()
_rng = random.Random()


def _below_ephemeral() -> range | None:
    """Ports under the ephemeral range (Linux), at most 12,000 of them; None elsewhere."""
    try:
        low = int(_RANGE_FILE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    start = max(10_000, low - 12_000)
    return range(start, low) if low - start >= 1_000 else None


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now and that this process has not handed out."""
    span = _below_ephemeral()
    with _lock:
        if span is not None:
            for _ in range(200):
                port = _rng.choice(span)
                if port not in _given and _bindable(port):
                    _given.add(port)
                    return port
        # No such range (not Linux, or a machine whose ephemeral range starts low).
        for _ in range(200):
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = int(s.getsockname()[1])
            if port not in _given:
                _given.add(port)
                return port
    raise OSError("no free TCP port on 127.0.0.1")
