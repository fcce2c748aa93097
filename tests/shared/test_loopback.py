from __future__ import annotations

import socket
from pathlib import Path

import pytest
from strata.shared import loopback
from strata.shared.loopback import free_port


def _ephemeral_low() -> int | None:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except OSError:
        return None


def test_ports_are_distinct_bindable_and_below_the_ephemeral_range() -> None:
    ports = [free_port() for _ in range(50)]
    assert len(set(ports)) == 50
    low = _ephemeral_low()
    if low is not None and low >= 11_000:
        assert all(p < low for p in ports)
    for p in ports[:5]:
        with socket.socket() as s:
            s.bind(("127.0.0.1", p))


def test_a_port_in_use_is_not_handed_out(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = busy.getsockname()[1]
        # The range below the ephemeral one holds only the busy port.
        monkeypatch.setattr(loopback, "_below_ephemeral", lambda: range(taken, taken + 1))
        monkeypatch.setattr(loopback, "_given", set())
        got = free_port()  # falls back to the kernel's pick
        assert got != taken


def test_without_the_range_file_the_kernel_picks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(loopback, "_RANGE_FILE", Path("/nonexistent/ip_local_port_range"))
    assert loopback._below_ephemeral() is None
    ports = {free_port() for _ in range(20)}
    assert len(ports) == 20
