from __future__ import annotations

from pathlib import Path

import pytest
from strata.shared.models import ModelRepository
from strata.tools.cli import main
from strata.tools.models.bench import compare
from strata.tools.models.fp16 import add_fp16_variant
from strata.tools.models.quantize import QuantizeRequest, quantize


def test_compare_variants(tiny_repo: Path, synthetic_mp4: Path) -> None:
    repo = ModelRepository(tiny_repo)
    quantize(repo, QuantizeRequest(name="tiny", clip=synthetic_mp4, samples=4, eval_frames=4,
                                   timing_runs=2, method="minmax", progress=False))  # fmt: skip
    add_fp16_variant(tiny_repo, "tiny")
    variants = ["primary", "int8", "fp16@onnxruntime-cpu"]
    rep = compare(repo, "tiny", variants, synthetic_mp4, frames=4, runs=3)
    assert [r.variant for r in rep.results] == ["fp32", "int8", "fp16@onnxruntime-cpu"]
    assert rep.results[0].agreement is None
    for r in rep.results[1:]:
        assert r.agreement is not None and r.agreement.frames == 4
        assert r.agreement.value is not None and 0.0 <= r.agreement.value <= 1.0
    assert all(r.median_ms > 0 for r in rep.results)
    table = rep.markdown()
    assert "| fp16@onnxruntime-cpu | fp16 |" in table
    assert "| int8 | int8 |" in table and "reference" in table and "CPU ms" in table
    assert "cores" in rep.machine


def test_cli_bench(
    tiny_repo: Path, synthetic_mp4: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["models", "bench", "tiny", "-r", str(tiny_repo), "--clip", str(synthetic_mp4),
                 "--frames", "3", "--runs", "2"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "| fp32 | fp32 |" in out
    assert main(["models", "bench", "tiny", "-r", str(tiny_repo), "--clip", str(synthetic_mp4),
                 "--variants", "primary,int8"]) == 2  # fmt: skip
    assert "no variant 'int8'" in capsys.readouterr().err
