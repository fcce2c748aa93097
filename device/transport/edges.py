"""Which edge nodes the agent talks to, and which of them are alive.

Membership comes from a static list (`--edge` repeated, `device.edges`) and from
`dns://NAME:PORT` entries, which stand for every address NAME resolves to (a Kubernetes
headless Service) and are resolved again every `resolve_interval_s`. A failed resolution
keeps the addresses last seen, so a DNS hiccup never empties the ring.

Liveness is the agent's own view: an edge is up while it has answered something (an ack or
a heartbeat) within `edge_timeout_s`. The sender heartbeats every edge, so an idle edge
stays up and a dead one goes down within the timeout.

Reachability holds for every edge, a single one too (which stays the place to send): an
edge that answers nothing for `edge_timeout_s` after being sent something (a frame, a
heartbeat: tried, even if ZeroMQ had no connection to take it) is unreachable, killed,
crashed or cut off; it is reachable again at its next answer (a reconnect). An idle edge
asked nothing is never called unreachable; one that has never answered (not started yet)
is said to be silent, not counted as lost.
"""

from __future__ import annotations

import logging
import math
import socket
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from strata.shared.config.device import RoutingConfig
from strata.shared.contracts import frame_pb2
from strata.shared.ring import FOUNDING, Member

log = logging.getLogger(__name__)

# (host, port) -> addresses; socket.getaddrinfo by default.
Resolver = Callable[[str, int], list[str]]


def resolve_host(host: str, port: int) -> list[str]:
    """Every address `host` resolves to (IPv4 and IPv6), deduplicated, sorted."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return sorted({str(info[4][0]) for info in infos})


def tcp_endpoint(address: str, port: int) -> str:
    """tcp://ADDRESS:PORT, with an IPv6 address in brackets."""
    return f"tcp://[{address}]:{port}" if ":" in address else f"tcp://{address}:{port}"


class Directory:
    """The configured edge entries, expanded to endpoints (dns:// ones re-resolved)."""

    def __init__(
        self,
        entries: Sequence[str],
        resolve_interval_s: float,
        resolver: Resolver = resolve_host,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not entries:
            raise ValueError("no edge endpoints")
        self.entries = list(entries)
        self.resolve_interval_s = resolve_interval_s
        self._resolver = resolver
        self._clock = clock
        self._resolved: dict[str, list[str]] = {}
        self._next = -math.inf
        self._warned: dict[str, float] = {}

    def endpoints(self) -> list[str]:
        """The endpoints now (resolving dns:// entries when due), in entry order."""
        now = self._clock()
        if now >= self._next:
            self._next = now + self.resolve_interval_s
            for e in self.entries:
                if e.startswith("dns://"):
                    self._resolve(e, now)
        out: list[str] = []
        for e in self.entries:
            found = self._resolved.get(e, []) if e.startswith("dns://") else [e]
            out.extend(x for x in found if x not in out)
        return out

    def _resolve(self, entry: str, now: float) -> None:
        host, _, port_s = entry.removeprefix("dns://").rpartition(":")
        port = int(port_s)
        try:
            found = [tcp_endpoint(a, port) for a in self._resolver(host.strip("[]"), port)]
        except OSError as exc:
            # Keep what we had: a resolver outage must not take every edge away.
            if now - self._warned.get(entry, -math.inf) >= 60.0:
                self._warned[entry] = now
                log.warning(
                    "cannot resolve %s (%s); keeping its %d known address(es)",
                    entry,
                    exc,
                    len(self._resolved.get(entry, [])),
                )
            return
        if found != self._resolved.get(entry):
            log.info("%s resolves to %s", entry, ", ".join(found) or "nothing")
        self._resolved[entry] = found


@dataclass(slots=True)
class EdgeLink:
    """One edge as the sender sees it: its socket and what it last said."""

    endpoint: str
    sock: Any
    created_at: float
    last_heard: float = -math.inf
    last_beat: float = -math.inf
    # When it last came up (for the ring's warm-up); FOUNDING for edges up from the start.
    joined_at: float = FOUNDING
    up: bool = False
    # When the agent first tried to send it something it has not answered yet (inf: none).
    asked_at: float = math.inf
    # False from `edge_timeout_s` of silence after being asked until its next answer.
    reachable: bool = True
    lost_at: float = 0.0
    # It was lost before it ever answered (an edge not started yet: not a reconnect).
    lost_unheard: bool = False
    edge_session: int = 0
    info: frame_pb2.EdgeInfo = field(default_factory=frame_pb2.EdgeInfo)

    def heard(self, now: float, info: frame_pb2.EdgeInfo | None) -> bool:
        """Something came from the edge; True when its EdgeInfo says it restarted."""
        self.last_heard = now
        self.asked_at = math.inf
        if info is None or not info.edge_session:
            # An EdgeInfo without a session is not the node's announcement (older nodes put
            # the model input alone on every ack): no restart, and the full one it would
            # replace keeps the capacity, models and accepting flag routing needs.
            return False
        self.info = info
        restarted = bool(self.edge_session) and info.edge_session != self.edge_session
        if info.edge_session:
            self.edge_session = info.edge_session
        return restarted

    def asked(self, now: float) -> None:
        """The agent tried to send it something (answered or not, it counts from now)."""
        if self.asked_at == math.inf:
            self.asked_at = now

    def member(self, use_capacity: bool) -> Member | None:
        """This edge on the ring, or None when it is down or not accepting cameras."""
        if not self.up:
            return None
        info = self.info
        # An edge that never sent EdgeInfo (an older node) is an ordinary accepting node.
        if info.edge_session and not info.accepting:
            return None
        weight = info.weight if info.weight > 0 else 1.0
        if use_capacity and info.capacity_fps > 0:
            weight *= info.capacity_fps
        return Member(self.endpoint, weight, frozenset(info.models), self.joined_at)


def update_liveness(
    links: Iterable[EdgeLink], now: float, timeout_s: float, founding_until: float | None
) -> tuple[list[EdgeLink], list[EdgeLink]]:
    """Mark links up or down by when they were last heard; returns (came up, went down).

    An edge that comes up before `founding_until` (None: no edge has been up yet) is a
    founding member: no warm-up. Warm-up protects a newcomer joining a ring that already
    carries the cameras; at start every edge is new and none should be held back.
    """
    came: list[EdgeLink] = []
    went: list[EdgeLink] = []
    for link in links:
        fresh = now - link.last_heard < timeout_s
        if fresh and not link.up:
            link.up = True
            founding = founding_until is None or now < founding_until
            link.joined_at = FOUNDING if founding else now
            came.append(link)
        elif not fresh and link.up:
            link.up = False
            went.append(link)
    return came, went


def heartbeat_header(agent_id: str, session_id: int) -> frame_pb2.FrameHeader:
    """A FRAME_KIND_HEARTBEAT header (no camera, empty payload)."""
    return frame_pb2.FrameHeader(
        agent_id=agent_id, session_id=session_id, kind=frame_pb2.FRAME_KIND_HEARTBEAT
    )


class EdgeConnectError(RuntimeError):
    """An edge endpoint or the CURVE keys cannot be used."""


class EdgePool:
    """One DEALER per edge endpoint, owned by the sender thread (sockets are not
    thread-safe): connects new endpoints, closes dropped ones, heartbeats, tracks liveness."""

    def __init__(
        self,
        directory: Directory,
        cfg: RoutingConfig,
        connect: Callable[[str], Any],
        heartbeat: frame_pb2.FrameHeader | None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.directory = directory
        self.heartbeat_interval_s = cfg.heartbeat_interval_s
        self.edge_timeout_s = cfg.edge_timeout_s
        self._connect = connect
        # None: no heartbeats (a single static edge: nothing to choose between).
        self._heartbeat = heartbeat
        self._clock = clock
        self.started_at = clock()
        # Edges coming up before this are founding members (set when the first comes up).
        self.founding_until: float | None = None
        self.links: dict[str, EdgeLink] = {}
        self._by_sock: dict[Any, EdgeLink] = {}
        self._poller: Any = None

    @property
    def heartbeats(self) -> bool:
        """Whether liveness is tracked (several edges, or a dns:// name)."""
        return self._heartbeat is not None

    def sync(self) -> tuple[list[str], list[EdgeLink]]:
        """Connect endpoints that appeared, close those that went; (added, removed).

        EdgeConnectError for an endpoint that cannot be used (the first sync raises it at
        start; later ones log it and skip the endpoint).
        """
        import zmq

        if self._poller is None:
            self._poller = zmq.Poller()
        now = self._clock()
        want = self.directory.endpoints()
        added: list[str] = []
        for ep in want:
            if ep in self.links:
                continue
            sock = self._connect(ep)
            link = EdgeLink(ep, sock, now)
            if self._heartbeat is None:
                link.up = True  # a single edge is always the place to send
            self.links[ep] = link
            self._by_sock[sock] = link
            self._poller.register(sock, zmq.POLLIN)
            added.append(ep)
        removed = [link for ep, link in self.links.items() if ep not in want]
        for link in removed:
            self._poller.unregister(link.sock)
            del self._by_sock[link.sock]
            del self.links[link.endpoint]
            link.sock.close(0)
            link.up = False
        return added, removed

    def poll(self, timeout_ms: int) -> list[EdgeLink]:
        """Links with messages to read."""
        if not self.links:
            time.sleep(timeout_ms / 1e3)
            return []
        return [self._by_sock[s] for s, _ in self._poller.poll(timeout_ms)]

    def beat(self, now: float) -> None:
        """Heartbeat every edge that is due (dropped silently while it is not connected:
        the missing answer is what marks it down)."""
        import zmq

        if self._heartbeat is None:
            return
        from strata.shared.wire import pack_frame

        for link in self.links.values():
            if now - link.last_beat < self.heartbeat_interval_s:
                continue
            link.last_beat = now
            link.asked(now)
            self._heartbeat.send_ns = time.time_ns()
            try:
                link.sock.send_multipart(pack_frame(self._heartbeat, b""), zmq.NOBLOCK)
            except zmq.Again:
                pass

    def liveness(self, now: float) -> tuple[list[EdgeLink], list[EdgeLink]]:
        """(came up, went down) since the last call."""
        if self._heartbeat is None:
            return [], []
        came, went = update_liveness(
            self.links.values(), now, self.edge_timeout_s, self.founding_until
        )
        if came and self.founding_until is None:
            self.founding_until = now + self.edge_timeout_s
        return came, went

    def reachability(self, now: float) -> tuple[list[EdgeLink], list[EdgeLink]]:
        """(unreachable now, reachable again) since the last call: see the module doc."""
        lost: list[EdgeLink] = []
        back: list[EdgeLink] = []
        for link in self.links.values():
            silent = now - link.asked_at >= self.edge_timeout_s
            if silent and link.reachable:
                link.reachable, link.lost_at = False, now
                link.lost_unheard = link.last_heard == -math.inf
                lost.append(link)
            elif not silent and not link.reachable:
                link.reachable = True
                back.append(link)
        return lost, back

    def starting(self, now: float) -> bool:
        """The founding edges are still coming up (placement need not be paced)."""
        return self.founding_until is None or now < self.founding_until

    def members(self, use_capacity: bool) -> list[Member]:
        """The edges on the ring now."""
        return [m for link in self.links.values() if (m := link.member(use_capacity))]

    def close(self) -> None:
        """Close every socket."""
        for link in self.links.values():
            link.sock.close(0)
        self.links.clear()
        self._by_sock.clear()
