"""Opening the outbox's database: the store's own, SQLite or PostgreSQL by its URL."""

from __future__ import annotations

import importlib

from strata.cloud.store.registry import StoreError, store_url
from strata.shared.config.cloud import CloudStoreConfig

from .db import Database, LedgerError
from .sqlite import SQLiteDatabase


def open_database(cfg: CloudStoreConfig) -> Database:
    """A connection to the store's database (the store has created its tables); the outbox
    tables are created if missing. Raises LedgerError."""
    try:
        url = store_url(cfg)
    except StoreError as exc:
        raise LedgerError(str(exc)) from None
    if url:
        # By name, as the store picks its back end: psycopg loads only for PostgreSQL.
        postgres = importlib.import_module("strata.cloud.outbox.postgres")
        db: Database = postgres.PostgresDatabase(url, cfg.connect_timeout_s)
        return db
    return SQLiteDatabase(cfg.path)
