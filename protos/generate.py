"""Regenerate the Python contracts in shared/contracts/ from protos/: `python protos/generate.py`.

`--check` regenerates into a temporary folder and fails if the committed code is stale.
"""

from __future__ import annotations

import argparse
import filecmp
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROTOS = ROOT / "protos"
OUT = ROOT / "shared" / "contracts"
# protoc writes `from strata.v1 import x_pb2`; our package lives elsewhere.
_IMPORT = re.compile(r"^from strata\.v1 import (\w+_pb2)", re.MULTILINE)


def generate(out: Path) -> list[Path]:
    """Run protoc over every .proto and return the files written."""
    from grpc_tools import protoc  # dev extra only

    protos = sorted(PROTOS.rglob("*.proto"))
    with tempfile.TemporaryDirectory() as tmp:
        include = Path(protoc.__file__).parent / "_proto"
        args = [
            "protoc",
            f"-I{PROTOS}",
            f"-I{include}",
            f"--python_out={tmp}",
            f"--pyi_out={tmp}",
            f"--grpc_python_out={tmp}",
            *[str(p) for p in protos],
        ]
        if protoc.main(args) != 0:
            raise SystemExit("protoc failed")
        written = []
        for src in sorted((Path(tmp) / "strata" / "v1").glob("*")):
            text = _IMPORT.sub(r"from . import \1", src.read_text())
            if src.name.endswith("_grpc.py") and "Stub" not in text:
                continue  # a proto without services
            dst = out / src.name
            dst.write_text(text)
            written.append(dst)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail if the generated code is stale")
    args = parser.parse_args(argv)
    if not args.check:
        for path in generate(OUT):
            print(path.relative_to(ROOT))
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        fresh = generate(Path(tmp))
        stale = [
            p.name
            for p in fresh
            if not (OUT / p.name).exists() or not filecmp.cmp(p, OUT / p.name, shallow=False)
        ]
    if stale:
        print(
            "stale generated contracts: " + ", ".join(stale) + "\nrun: python protos/generate.py",
            file=sys.stderr,
        )
        return 1
    print("generated contracts are up to date")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
