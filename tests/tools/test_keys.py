"""`strata keys`: key pairs zmq.auth can load, secrets private, nothing overwritten."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
from strata.shared.curve import CurveError, load_keys
from strata.tools.cli import main


def test_keys_makes_loadable_pairs_with_private_secrets(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "keys"
    assert main(["keys", "edge", "cam-1", "--out", str(out)]) == 0
    for name in ("edge", "cam-1"):
        public, secret = load_keys(out / f"{name}.key_secret", need_secret=True)
        assert len(public) == 40 and secret is not None and len(secret) == 40
        assert load_keys(out / f"{name}.key", need_secret=False) == (public, None)
        assert stat.S_IMODE((out / f"{name}.key_secret").stat().st_mode) == 0o600
    assert "edge: public" in capsys.readouterr().out
    with pytest.raises(CurveError, match="no secret"):
        load_keys(out / "edge.key", need_secret=True)


def test_keys_refuses_to_overwrite_without_force(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["keys", "edge", "--out", str(tmp_path)]) == 0
    before = (tmp_path / "edge.key_secret").read_bytes()
    assert main(["keys", "edge", "--out", str(tmp_path)]) == 2
    assert "exists" in capsys.readouterr().err
    assert (tmp_path / "edge.key_secret").read_bytes() == before
    assert main(["keys", "edge", "--out", str(tmp_path), "--force"]) == 0
    assert (tmp_path / "edge.key_secret").read_bytes() != before
    assert main(["keys", "../up", "--out", str(tmp_path)]) == 2
