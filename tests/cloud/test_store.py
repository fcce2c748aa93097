"""cloud/store/registry.py: the back end registry by URL scheme, and where the URL comes from."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from strata.cloud.metrics import CloudMetrics
from strata.cloud.store.registry import BACKENDS, StoreError, backend_class, open_store, store_url
from strata.cloud.store.sqlite import SQLiteStore
from strata.shared.config.cloud import CloudStoreConfig


def test_no_url_opens_the_sqlite_file(tmp_path: Path) -> None:
    store = open_store(CloudStoreConfig(path=str(tmp_path / "e.sqlite")), CloudMetrics())
    try:
        assert isinstance(store, SQLiteStore)
        assert store.count() == 0
    finally:
        store.close()


def test_each_scheme_names_an_importable_back_end() -> None:
    assert backend_class("") is SQLiteStore
    assert backend_class("postgresql://u@127.0.0.1/db").__name__ == "PostgresStore"
    assert backend_class("postgres://u@127.0.0.1/db").__name__ == "PostgresStore"
    assert set(BACKENDS) == {"", "postgresql", "postgres"}


def test_an_unknown_scheme_says_which_are_known() -> None:
    with pytest.raises(StoreError, match=r"'mysql'.*postgres, postgresql"):
        backend_class("mysql://u@h/db")


def test_a_missing_back_end_package_says_how_to_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    # None in sys.modules makes the import fail as for a package that is not installed.
    monkeypatch.setitem(sys.modules, "strata.cloud.store.postgres", None)
    with pytest.raises(StoreError, match="not installed"):
        backend_class("postgresql://u@127.0.0.1/db")


def test_url_file_holds_the_url(tmp_path: Path) -> None:
    assert store_url(CloudStoreConfig()) == ""
    f = tmp_path / "url"
    f.write_text("postgresql://u:secret@127.0.0.1:5/db\n")
    assert store_url(CloudStoreConfig(url_file=str(f))) == "postgresql://u:secret@127.0.0.1:5/db"
    f.write_text("mysql://u@h/db\n")
    with pytest.raises(StoreError, match="does not hold a postgresql:// URL"):
        store_url(CloudStoreConfig(url_file=str(f)))
    with pytest.raises(StoreError, match=r"cannot read cloud\.store\.url_file"):
        store_url(CloudStoreConfig(url_file=str(tmp_path / "absent")))
