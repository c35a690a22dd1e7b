"""The store contract against SQLite: one database file per test."""

from __future__ import annotations

import pytest

from tests.store.contract import StoreContract
from xce.store.sqlite import SQLiteStore


class TestSQLiteStore(StoreContract):
    expected_backend = "sqlite"

    @pytest.fixture
    def make_store(self, tmp_path):
        path = str(tmp_path / "xce.db")
        return lambda: SQLiteStore(path)
