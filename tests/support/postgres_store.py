"""A PostgreSQL checkpointer in a schema of its own, for the tests marked ``postgres``: the
server is ``FSM_AGENT_PG_DSN`` (default: 127.0.0.1:5432, database ``test``), and a test that
finds no server or no ``[postgres]`` extra skips, saying why. The ``store`` fixture (shared
through conftest.py) runs a test on SQLite and on PostgreSQL."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from fsm_agent.persistence import Checkpointer, PostgresCheckpointer

__all__ = ["DSN", "postgres_checkpointer", "store"]

DSN = os.environ.get("FSM_AGENT_PG_DSN", "postgresql://postgres@127.0.0.1:5432/test")


@contextmanager
def postgres_checkpointer(prefix: str = "fsm_test") -> Iterator[PostgresCheckpointer]:
    """A checkpointer in a fresh schema named ``{prefix}_<random>``, dropped afterwards."""
    psycopg = pytest.importorskip("psycopg", reason="the [postgres] extra is not installed")
    try:
        psycopg.connect(DSN, connect_timeout=2).close()
    except psycopg.OperationalError as exc:
        pytest.skip(f"no PostgreSQL server answers at FSM_AGENT_PG_DSN ({exc})")
    from fsm_agent.persistence import PostgresCheckpointer

    store = PostgresCheckpointer(DSN, schema=f"{prefix}_{uuid.uuid4().hex[:12]}")
    try:
        yield store
    finally:
        store.drop_schema()
        store.close()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Checkpointer]:
    """A fresh SQLite file, or a fresh schema on the PostgreSQL server."""
    if request.param == "sqlite":
        from fsm_agent.persistence import SQLiteCheckpointer

        sqlite_store = SQLiteCheckpointer(tmp_path / "runs.db")
        yield sqlite_store
        sqlite_store.close()
    else:
        with postgres_checkpointer() as pg_store:
            yield pg_store
