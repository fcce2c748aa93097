"""Open the event store the config names: a registry of back ends by URL scheme.

Back ends register here as "module:Class" and are imported by name only when chosen, so a
SQLite-only install never loads psycopg, and no back end is imported by the interface it
implements (`event_store`). The interface's names are re-exported: callers need one import.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from urllib.parse import urlsplit

from strata.shared.config.cloud import POSTGRES_SCHEMES, CloudStoreConfig

from ..metrics import CloudMetrics
from .clip_rows import ClipLookupError, ClipQuery, ClipRow, ClipWrite
from .event_store import (
    SCHEMA_VERSION,
    CommitListener,
    EventQuery,
    EventStore,
    PageKey,
    StoreBusyError,
    Stored,
    StoredTrack,
    StoreError,
)
from .snapshot_rows import SnapshotLookupError, SnapshotQuery, SnapshotRow, StoredSnapshot
from .track_filter import TrackPageKey, TrackQuery

# URL scheme ("" for no URL: the SQLite file at cloud.store.path) -> "module:Class".
BACKENDS: dict[str, str] = {
    "": "strata.cloud.store.sqlite:SQLiteStore",
    "postgresql": "strata.cloud.store.postgres:PostgresStore",
    "postgres": "strata.cloud.store.postgres:PostgresStore",
}


def store_url(cfg: CloudStoreConfig) -> str:
    """The PostgreSQL URL the config names (url, or the first line of url_file); '' for none."""
    if not cfg.url_file:
        return cfg.url
    try:
        url = Path(cfg.url_file).read_text().strip()
    except OSError as exc:
        raise StoreError(
            f"cannot read cloud.store.url_file {cfg.url_file}: {exc.strerror}"
        ) from None
    if not url.startswith(POSTGRES_SCHEMES):
        raise StoreError(f"cloud.store.url_file {cfg.url_file} does not hold a postgresql:// URL")
    return url


def backend_class(url: str) -> type[EventStore]:
    """The back end for a store URL ('' for SQLite), imported now. Raises StoreError."""
    scheme = urlsplit(url).scheme if url else ""
    try:
        target = BACKENDS[scheme]
    except KeyError:
        raise StoreError(
            f"no event store back end for scheme {scheme!r}; known: "
            f"{', '.join(sorted(s for s in BACKENDS if s))} (or no URL for SQLite)"
        ) from None
    module_name, cls_name = target.split(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise StoreError(
            f"event store back end {module_name} needs a package that is not installed "
            f"({exc.name}); reinstall strata: pip install -e ."
        ) from exc
    cls: type[EventStore] = getattr(module, cls_name)
    return cls


def open_store(
    cfg: CloudStoreConfig, metrics: CloudMetrics, listener: CommitListener | None = None
) -> EventStore:
    """The PostgreSQL store when the config names a URL, else the SQLite file. Raises
    StoreError when it cannot open or migrate (nothing is left half-migrated)."""
    url = store_url(cfg)
    return backend_class(url).from_config(cfg, url, metrics, listener)


__all__ = [
    "BACKENDS",
    "SCHEMA_VERSION",
    "ClipLookupError",
    "ClipQuery",
    "ClipRow",
    "ClipWrite",
    "CommitListener",
    "EventQuery",
    "EventStore",
    "PageKey",
    "SnapshotLookupError",
    "SnapshotQuery",
    "SnapshotRow",
    "StoreBusyError",
    "StoreError",
    "Stored",
    "StoredSnapshot",
    "StoredTrack",
    "TrackPageKey",
    "TrackQuery",
    "backend_class",
    "open_store",
    "store_url",
]
