import argparse
import subprocess
import sys
from typing import Any

import pytest


def test_help_lists_without_heavy_imports() -> None:
    code = (
        "import sys; from strata.tools.cli import build_parser; build_parser(); "
        "bad = [m for m in ('torch', 'tensorrt', 'onnxruntime', 'av') if m in sys.modules]; "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def _parsers(parser: argparse.ArgumentParser, path: str = "strata") -> list[tuple[str, Any]]:
    """Every parser of the tree, with its command path."""
    out: list[tuple[str, Any]] = [(path, parser)]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out += _parsers(sub, f"{path} {name}")
    return out


def test_no_parser_takes_an_abbreviated_flag(capsys: pytest.CaptureFixture[str]) -> None:
    from strata.tools.cli import build_parser, main

    parsers = _parsers(build_parser())
    assert len(parsers) > 15
    assert [p for p, parser in parsers if parser.allow_abbrev] == []
    # `--frame 10` used to be taken as `--frames 10`.
    with pytest.raises(SystemExit) as exc:
        main(["demo", "--frame", "10"])
    assert exc.value.code == 2
    assert "unrecognized arguments: --frame" in capsys.readouterr().err


def test_a_standalone_command_refuses_abbreviations(capsys: pytest.CaptureFixture[str]) -> None:
    from strata.shared.config.reference import main

    with pytest.raises(SystemExit) as exc:
        main(["--writ", "x"])
    assert exc.value.code == 2
    assert "unrecognized arguments: --writ" in capsys.readouterr().err


@pytest.mark.parametrize(
    "part",
    ["device", "edge", "cloud", "cascade", "overload", "outage", "routing", "standby", "store",
     "hostile"],
)  # fmt: skip
def test_bench_parts_refuse_abbreviations(part: str, capsys: pytest.CaptureFixture[str]) -> None:
    from strata.tools.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["bench", part, "--jso", "x"])
    assert exc.value.code == 2
    assert "unrecognized arguments: --jso" in capsys.readouterr().err


def test_bench_lists_every_part_without_importing_one(capsys: pytest.CaptureFixture[str]) -> None:
    code = (
        "import sys; from strata.tools.cli import main\n"
        "try:\n    main(['bench', '--help'])\nexcept SystemExit:\n    pass\n"
        "bad = [m for m in sys.modules if m.startswith('strata.tools.bench.')]\n"
        # The table of parts and the cascade's shared argparse options (no benchmark).
        "bad.remove('strata.tools.bench.cli'); bad.remove('strata.tools.bench.clip_args')\n"
        "bad += [m for m in ('av', 'onnxruntime', 'cv2', 'numpy') if m in sys.modules]\n"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    from strata.tools.bench.cli import PARTS
    from strata.tools.cli import main

    for part in PARTS:
        assert f"\n    {part} " in out.stdout, part
    # A part's own options come with it when it is chosen.
    with pytest.raises(SystemExit):
        main(["bench", "outage", "--help"])
    assert "--outage-s" in capsys.readouterr().out


def test_help_lists_every_models_action(capsys: pytest.CaptureFixture[str]) -> None:
    from strata.tools.cli import build_parser

    parser = build_parser()
    models = dict(_parsers(parser))["strata models"]
    actions = next(a for a in models._actions if isinstance(a, argparse._SubParsersAction)).choices
    assert {"list", "inspect", "import", "build", "quantize", "engine", "distill"} <= set(actions)
    with pytest.raises(SystemExit):
        parser.parse_args(["--help"])
    top = " ".join(capsys.readouterr().out.split())  # help wraps lines
    assert f"models Model repository: {', '.join(actions)}." in top, top


def test_a_broken_pipe_that_is_not_stdout_is_not_hidden(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only a closed stdout ends quietly (tests/cloud/test_cloud_cli.py pipes into head);
    a BrokenPipeError from anything else (a socket) stays an error."""
    from strata.tools import cli

    def broken(_args: argparse.Namespace) -> int:
        raise BrokenPipeError("a socket's")

    parser = cli.build_parser()
    monkeypatch.setattr(cli, "build_parser", lambda: parser)
    monkeypatch.setattr(parser, "parse_args", lambda _argv: argparse.Namespace(func=broken))
    with pytest.raises(BrokenPipeError):
        cli.main(["keys"])
    assert cli.stdout_closed() is False  # captured output: no descriptor to poll
