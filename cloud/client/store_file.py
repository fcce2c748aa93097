"""The SQLite event store file a client subcommand's --db names; shared by `strata cloud
query`, `snapshot` and `clip`."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the parser is built without the store's imports (tools/cli.py)
    from ..store.sqlite import SQLiteStore


def open_store_file(db: str) -> SQLiteStore:
    """The store in file `db`, opened as it is (never created); LookupError when there is no
    such file, StoreError when it is not a store this version reads."""
    from strata.shared.config.cloud import CloudStoreConfig

    from ..metrics import CloudMetrics
    from ..store.sqlite import SQLiteStore

    if not Path(db).is_file():
        raise LookupError(f"no such event store: {db}")
    return SQLiteStore(CloudStoreConfig(path=db), CloudMetrics())
