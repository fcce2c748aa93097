"""The gRPC channel and call metadata a client subcommand's flags name (--target, TLS
files, --token-file); shared by `strata cloud query`, `snapshot` and `clip`."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


def open_channel(args: argparse.Namespace) -> tuple[Any, list[tuple[str, str]]]:
    """The channel and call metadata the client flags name. Raises OSError."""
    from pathlib import Path

    import grpc

    if args.ca_file:
        creds = grpc.ssl_channel_credentials(
            Path(args.ca_file).read_bytes(),
            Path(args.key_file).read_bytes() if args.key_file else None,
            Path(args.cert_file).read_bytes() if args.cert_file else None,
        )
        channel = grpc.secure_channel(args.target, creds)
    else:
        channel = grpc.insecure_channel(args.target)
    metadata = []
    if args.token_file:
        token = Path(args.token_file).read_text().strip()
        metadata.append(("authorization", f"Bearer {token}"))
    return channel, metadata


@contextmanager
def not_found_as_lookup() -> Iterator[None]:
    """A call's NOT_FOUND raised as LookupError with its details (the subcommands answer 1,
    none stored, for it, as for a store file); other gRPC errors as they are."""
    import grpc

    try:
        yield
    except grpc.RpcError as exc:
        if exc.code() == grpc.StatusCode.NOT_FOUND:
            raise LookupError(exc.details()) from None
        raise
