"""`strata keys`: CURVE key pairs for the edge's two sockets (frames in, results out).

`strata keys edge` writes edge.key (public) and edge.key_secret; the edge's config names the
.key_secret (edge.curve.secret_key), each agent's config names edge.key
(device.sender.curve.server_key). `strata keys cam-host-1 --out agents` makes an agent's
pair, `strata keys dashboard` a results subscriber's (tools/subscriber.py, `curve=`);
copying a client's .key into the edge's clients folder (edge.curve.clients_dir) admits it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


def register(subparsers: Any) -> None:
    """Add the `keys` subcommand."""
    p = subparsers.add_parser(
        "keys",
        help="make CURVE key pairs for the edge's encrypted, authenticated sockets",
        description=(
            "Write NAME.key (public) and NAME.key_secret (keep it private, mode 0600) into "
            "--out for each NAME. Give the edge its .key_secret and a folder of its clients' "
            ".key files (agents and results subscribers); give each client its own "
            ".key_secret and the edge's .key."
        ),
    )
    p.add_argument(
        "names", nargs="+", metavar="NAME", help="key pair names (e.g. edge, cam-1, dashboard)"
    )
    p.add_argument("--out", default="keys", metavar="DIR", help="output folder (keys)")
    p.add_argument("--force", action="store_true", help="overwrite key pairs that already exist")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Make the key pairs; exit 2 rather than overwrite an existing one without --force."""
    from strata.shared.curve import make_key_pair

    out = Path(args.out)
    for name in args.names:
        if not name or "/" in name or name.startswith("."):
            print(f"strata keys: bad name {name!r}", file=sys.stderr)
            return 2
        existing = [p for p in (out / f"{name}.key", out / f"{name}.key_secret") if p.exists()]
        if existing and not args.force:
            print(f"strata keys: {existing[0]} exists; pass --force to replace it", file=sys.stderr)
            return 2
    for name in args.names:
        public, secret = make_key_pair(out, name)
        print(f"{name}: public {public}, secret {secret}")
    return 0
