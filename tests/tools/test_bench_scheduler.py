"""`strata bench scheduler`: each action from the command line (tiny sizes)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from strata.tools.cli import main


def test_compare_runs_every_policy_on_every_trace_and_saves_the_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, q = tmp_path / "compare.json", tmp_path / "q.json"
    args = ["--duration", "30", "--train", "60", "--q-table", str(q), "--json", str(out)]
    assert main(["bench", "scheduler", "compare", *args]) == 0
    rows = json.loads(out.read_text())
    assert {r["trace"] for r in rows} == {"steady", "bursty", "burst10x"}
    assert {"rule", "learned"} <= {r["policy"] for r in rows}
    assert all(r["answered"] + r["shed"] == r["offered"] for r in rows)
    assert q.is_file()
    assert "| trace | policy |" in capsys.readouterr().out


def test_an_action_is_required(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["bench", "scheduler"])
    assert exc.value.code == 2
    assert "ACTION" in capsys.readouterr().err
