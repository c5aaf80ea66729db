"""The PostgreSQL checkpointer against a real server (``FSM_AGENT_PG_DSN``, default
postgresql://postgres@127.0.0.1:5432/test); each test session uses its own schema."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from durable_scenario import PROMPT, RUN_ID, make_agent
from fsm_agent.errors import CheckpointConflictError, RunFinishedError, SchemaVersionError
from fsm_agent.testing import crash_and_resume, resume_differences
from postgres_store import DSN

pytestmark = pytest.mark.postgres


def test_a_run_round_trips_through_postgres(pg_store: object) -> None:
    """Every move is a checkpoint; the last loads back equal to the final state."""
    result = make_agent(pg_store, lambda _: None).run_sync(PROMPT)  # type: ignore[arg-type]
    checkpoint = pg_store.load(RUN_ID)  # type: ignore[attr-defined]
    assert checkpoint.version == len(result.trace)
    assert checkpoint.state == result.run_state
    assert [s.run_id for s in pg_store.runs()] == [RUN_ID]  # type: ignore[attr-defined]


def test_crash_and_resume_on_postgres_gives_the_same_result(pg_store: object) -> None:
    """Invariant 10 with the PostgreSQL store, at an effect-record boundary mid-run."""
    baseline = make_agent(None, lambda _: None).run_sync(PROMPT)
    seen: Counter[str] = Counter()
    agent = make_agent(None, lambda w: seen.update([w]))
    result, crashed = asyncio.run(
        crash_and_resume(agent, PROMPT, crash_after=9, at="any", store=pg_store)  # type: ignore[arg-type]
    )
    assert crashed and resume_differences(baseline, result) == []
    assert seen["charge"] == 1


def test_two_workers_conflict_and_a_newer_schema_is_refused(pg_store: object) -> None:
    """A stale version is refused; a schema from the future raises SchemaVersionError."""
    from fsm_agent.persistence import PostgresCheckpointer

    make_agent(pg_store, lambda _: None).run_sync(PROMPT)  # type: ignore[arg-type]
    state = pg_store.load(RUN_ID).state  # type: ignore[attr-defined]
    with pytest.raises(CheckpointConflictError):
        pg_store.save(state, version=3)  # type: ignore[attr-defined]
    with pytest.raises(RunFinishedError):
        asyncio.run(make_agent(pg_store, lambda _: None).resume(RUN_ID))  # type: ignore[arg-type]
    schema = pg_store.schema  # type: ignore[attr-defined]
    with pg_store._write() as cur:  # type: ignore[attr-defined]
        cur.execute(f"UPDATE \"{schema}\".meta SET value = '99' WHERE key = 'schema_version'")
    with pytest.raises(SchemaVersionError):
        PostgresCheckpointer(DSN, schema=schema)


def test_a_stale_checkpoint_moves_nothing_and_names_the_newer_version(pg_store: object) -> None:
    """A checkpoint is one statement (the run's row moves and the row is inserted together):
    writing over a newer version raises the conflict and leaves both tables as they were."""
    from fsm_agent import Message, RunState, State

    rs = RunState(run_id="run_1", state=State.CALLING)
    rs.messages = [Message.user("hello")]
    for version in (1, 2, 3):
        pg_store.save(rs, version=version)  # type: ignore[attr-defined]
    with pytest.raises(CheckpointConflictError, match="another worker wrote it first"):
        pg_store.save(rs, version=3)  # type: ignore[attr-defined]
    with pytest.raises(CheckpointConflictError):
        pg_store.save(rs, version=2)  # type: ignore[attr-defined]
    with pg_store._read() as cur:  # type: ignore[attr-defined]
        cur.execute(f'SELECT version FROM "{pg_store.schema}".runs')  # type: ignore[attr-defined]
        assert cur.fetchall() == [(3,)]
        cur.execute(f'SELECT version FROM "{pg_store.schema}".checkpoints ORDER BY version')  # type: ignore[attr-defined]
        assert cur.fetchall() == [(1,), (2,), (3,)]
    assert pg_store.load("run_1").version == 3  # type: ignore[attr-defined]
