"""Decoding ahead on a thread of its own: the same frames, errors and end in the same order,
at most `depth` frames waiting, a close that stops the thread and closes the generator;
the agent settles `auto` by its cameras against the cores, and an agent decoding ahead
sends exactly the frames one that does not sends."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from strata.device.capture.decode_ahead import DecodeAhead
from strata.device.capture.sources import SourceError


def test_every_item_arrives_in_order() -> None:
    with DecodeAhead(iter(range(500)), depth=2) as ahead:
        assert list(ahead) == list(range(500))
        assert list(ahead) == []  # ended stays ended


def test_an_error_arrives_after_the_items_before_it() -> None:
    def frames() -> Iterator[int]:
        yield 1
        yield 2
        raise SourceError("stream died")

    got: list[int] = []
    with DecodeAhead(frames()) as ahead, pytest.raises(SourceError, match="stream died"):
        for x in ahead:
            got.append(x)
    assert got == [1, 2]


def test_the_decoder_waits_for_a_slow_reader() -> None:
    made: list[int] = []

    def frames() -> Iterator[int]:
        for i in range(100):
            made.append(i)
            yield i

    with DecodeAhead(frames(), depth=3) as ahead:
        time.sleep(0.3)
        # `depth` queued and one in hand waiting for room: never the whole clip.
        assert len(made) == 4
        assert next(ahead) == 0


def test_close_stops_the_thread_and_closes_the_generator() -> None:
    closed = threading.Event()

    def frames() -> Iterator[int]:
        try:
            i = 0
            while True:
                yield i
                i += 1
        finally:
            closed.set()

    before = threading.active_count()
    ahead = DecodeAhead(frames(), depth=2, name="decode-test")
    assert next(ahead) == 0
    ahead.close()
    assert closed.is_set(), "the generator's cleanup ran"
    assert threading.active_count() == before
    with pytest.raises(StopIteration):
        next(ahead)


def test_a_depth_under_one_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        DecodeAhead(iter(()), depth=0)


def test_auto_decodes_ahead_only_with_fewer_cameras_than_cores(
    monkeypatch: pytest.MonkeyPatch, synthetic_mp4: Path
) -> None:
    from prometheus_client import CollectorRegistry
    from strata.device.agent import Agent
    from strata.shared.config.device import CameraConfig, DeviceConfig

    def agent(cameras: int, ahead: str = "auto") -> Agent:
        cfg = DeviceConfig(
            agent_id="a",
            source={"decode_ahead": ahead},
            cameras=[CameraConfig(id=f"c{i}", source=str(synthetic_mp4)) for i in range(cameras)],
        )
        return Agent(cfg, registry=CollectorRegistry())

    monkeypatch.setattr("os.cpu_count", lambda: 4)
    assert [c.cfg.decode_ahead for c in agent(3).cameras] == ["on"] * 3
    assert [c.cfg.decode_ahead for c in agent(4).cameras] == ["off"] * 4
    assert [c.cfg.decode_ahead for c in agent(4, "on").cameras] == ["on"] * 4
    assert [c.cfg.decode_ahead for c in agent(1, "off").cameras] == ["off"]
    # A reload settles it for the cameras it starts against the cameras it now runs.
    grown = agent(1)
    grown.reload([CameraConfig(id=f"c{i}", source=str(synthetic_mp4)) for i in range(5)])
    assert [c.cfg.decode_ahead for c in grown.cameras] == ["on"] + ["off"] * 4


def test_an_agent_decoding_ahead_sends_what_one_that_does_not_sends(
    synthetic_mp4: Path,
) -> None:
    from strata.shared.config.device import DeviceConfig, SourceConfig
    from strata.tools.bench.device import run_agent

    def run(ahead: str) -> tuple[int, int, int, int]:
        base = DeviceConfig(agent_id="bench", source=SourceConfig(decode_ahead=ahead))
        r = run_agent(synthetic_mp4, base)
        return r.frames, r.sent, r.dropped_motion, r.bytes_sent

    off, on = run("off"), run("on")
    assert on == off and off[1] > 2
