"""`strata bench device` runs and writes the keys `strata bench` reads."""

from __future__ import annotations

import json
from pathlib import Path

from strata.tools.bench.sink_process import StandInEdge
from strata.tools.cli import main

KEYS = {
    "decode_fps",
    "agent_fps",
    "ratio",
    "decode_bgr_fps",
    "ratio_vs_decode_bgr",
    "frames",
    "dropped_motion",
    "dropped_gate",
    "bytes_sent",
    "bytes_source",
}


def test_bench_writes_its_json(tmp_path: Path, synthetic_mp4: Path) -> None:
    out = tmp_path / "device.json"
    rc = main(
        [
            "bench",
            "device",
            "--clip",
            str(synthetic_mp4),
            "--avi",
            str(tmp_path / "absent.avi"),
            "--synthetic",
            "width=160,height=120,frames=20,seed=2",
            "--repeats",
            "1",
            "--json",
            str(out),
        ]
    )
    assert rc == 0
    doc = json.loads(out.read_text())
    assert doc.keys() >= KEYS
    assert doc["frames"] == 60 and doc["decode_fps"] > 0 and doc["agent_fps"] > 0
    assert doc["ratio"] == doc["agent_fps"] / doc["decode_fps"]
    assert doc["ratio_vs_decode_bgr"] == doc["agent_fps"] / doc["decode_bgr_fps"]
    assert len(doc["decode_fps_runs"]) == len(doc["decode_bgr_fps_runs"]) == 1
    assert doc["bytes_source"] == synthetic_mp4.stat().st_size
    assert 0 < doc["dropped_motion"] < 60  # the clip has still and moving stretches
    assert set(doc["clips"]) == {synthetic_mp4.name, "synthetic"}
    assert doc["machine"]["cores"] >= 1
    assert doc["command"].startswith("strata bench device --clip ")


def test_the_sink_announces_the_edge_model_input_and_the_agent_scales_to_it(
    synthetic_mp4: Path,
) -> None:
    from strata.shared.config.device import DeviceConfig, PayloadConfig, SourceConfig
    from strata.tools.bench.device import edge_model_input, run_agent

    side = edge_model_input()
    assert side > 0  # the starter detector's input (320)
    # Played at its rate, as a camera delivers: the first ack is back before the next
    # frames are encoded (as fast as it decodes, a busy host encoded half the clip before it).
    base = DeviceConfig(
        agent_id="bench", payload=PayloadConfig(), source=SourceConfig(realtime=True)
    )
    full = run_agent(synthetic_mp4, base)
    scaled = run_agent(synthetic_mp4, base, stand_in=StandInEdge(side // 4))
    # The same frames, smaller once the first ack has told the agent the detector's input.
    assert scaled.sent == full.sent > 2
    assert scaled.bytes_sent < full.bytes_sent / 2
    # A stand-in that advises a calibrated gap, as an edge does: fewer frames kept.
    spaced = run_agent(synthetic_mp4, base, stand_in=StandInEdge(side // 4, gap=4))
    assert 0 < spaced.sent < full.sent, (spaced.sent, full.sent)
