"""A PostgreSQL checkpointer in a schema of its own, for the tests marked ``postgres``: the
server is ``FSM_AGENT_PG_DSN`` (default: 127.0.0.1:5432, database ``test``), and a test that
finds no server or no ``[postgres]`` extra skips, saying why. The store fixtures built on it are
in tests/conftest.py."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from fsm_agent.persistence import PostgresCheckpointer

__all__ = ["DSN", "postgres_checkpointer"]

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
