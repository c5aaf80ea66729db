"""Runs on DBOS (fsm_agent.durable) with real components: DBOS on SQLite in this process and in
worker processes that are SIGKILLed, and on a real PostgreSQL server with two workers draining
a queue. The worker processes are tests/support/dbos_worker.py; their model calls and tool
effects go to a log file that survives the kills."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

pytest.importorskip("dbos", reason="the [dbos] extra is not installed")

from dbos import DBOS, DBOSClient

import dbos_worker
from fsm_agent import Agent, Policy, RetryPolicy, RunResult, Runtime, State, StopReason, tool
from fsm_agent.durable import DurableRuns, register_agent
from fsm_agent.errors import AuthenticationError, DurableRunError
from fsm_agent.events import Event
from fsm_agent.testing import ScriptedModel, Turn, fail, text, tool_call, tool_calls
from helpers import add

WORKER = Path(__file__).resolve().parents[1] / "support" / "dbos_worker.py"
DSN = os.environ.get("FSM_AGENT_PG_DSN", "postgresql://postgres@127.0.0.1:5432/test")


# -- in this process: a run on DBOS is the same run as a local one -------------------------------
@tool
def lookup(key: str) -> str:
    """Look a key up."""
    if key == "missing":
        raise KeyError(key)
    return f"value of {key}"


executed: Counter[str] = Counter()


@tool
async def wait(tag: str, seconds: float) -> str:
    """Wait, then say so (not idempotent)."""
    executed[tag] += 1
    await asyncio.sleep(seconds)
    return f"{tag} waited {seconds} s"


@tool(idempotent=True)
async def wait_again(tag: str, seconds: float) -> str:
    """Wait, then say so (idempotent)."""
    return await wait.fn(tag, seconds)  # type: ignore[no-any-return]


SCRIPTS: dict[str, Callable[[], list[Turn]]] = {
    "tools": lambda: [
        tool_call("add", {"a": 1, "b": 2}),
        tool_calls(("lookup", {"key": "x"}), ("lookup", {"key": "missing"})),
        tool_call("add", {"a": "not a number", "b": 1}),
        text("3, and x has a value"),
    ],
    "retry": lambda: [fail(), tool_call("add", {"a": 2, "b": 2}), fail(), text("4")],
    "parallel": lambda: [  # the first calls finish last
        tool_calls(
            ("wait", {"tag": "a", "seconds": 0.05}),
            ("wait_again", {"tag": "b", "seconds": 0.03}),
            ("wait", {"tag": "c", "seconds": 0.0}),
            ("wait_again", {"tag": "d", "seconds": 0.0}),
        ),
        text("all waited"),
    ],
    "abort": lambda: [fail(), fail(AuthenticationError("fatal: the key is revoked"))],
}


def scripted_agent(script: str) -> Agent[None]:
    retry = RetryPolicy(max_retries=2, base_delay_s=0.001, max_delay_s=0.01)
    return Agent(
        ScriptedModel(SCRIPTS[script]()),
        tools=[add, lookup, wait, wait_again],
        system_prompt="Be brief.",
        policy=Policy(max_steps=10, retry=retry),
    )


@pytest.fixture(scope="module")
def local_dbos(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """DBOS launched in this process on a fresh SQLite system database."""
    for script in SCRIPTS:
        register_agent(f"scripted-{script}", lambda s=script: scripted_agent(s))
    path = tmp_path_factory.mktemp("dbos") / "system.sqlite"
    DBOS(config=dbos_worker.config(f"sqlite:///{path}", "in-process"))
    DBOS.launch()
    yield
    DBOS.destroy()


def _same_run(durable: RunResult, local: RunResult) -> None:
    assert durable.stop_reason == local.stop_reason
    assert durable.state == local.state
    assert durable.output == local.output
    assert durable.trace == local.trace
    assert durable.messages == local.messages
    assert durable.usage == local.usage
    assert durable.counters == local.counters
    assert (durable.model_calls, durable.tool_executions) == (
        local.model_calls,
        local.tool_executions,
    )


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_a_run_on_dbos_is_the_same_run_as_a_local_one(local_dbos: None, script: str) -> None:
    """Same kernel, same table: trace, stop reason, history, usage and counters agree with a
    local run on the same scripted model, and the streamed events are the local run's (less
    the text deltas a step does not stream, and the jittered backoff delays)."""

    async def both() -> tuple[RunResult, RunResult, list[Event], list[Event]]:
        local_events = [e async for e in scripted_agent(script).run_stream("Go.")]
        local = await scripted_agent(script).run("Go.")
        runs = DurableRuns()
        run_id = await runs.start(f"scripted-{script}", "Go.", run_id=f"same-{script}")
        durable = await runs.result(run_id, timeout_s=30)
        events = [e async for e in runs.events(run_id)]
        return durable, local, events, local_events

    durable, local, events, local_events = asyncio.run(both())
    _same_run(durable, local)
    assert durable.run_id == f"same-{script}"

    def shape(stream: list[Event]) -> list[str]:
        return [e.type for e in stream if not e.type.endswith("_delta")]

    assert shape(events) == shape(local_events)
    if script == "abort":
        assert durable.stop_reason is StopReason.MODEL_ERROR
        assert durable.error is not None and "fatal" in str(durable.error)


def test_unknown_runs_and_agents_raise_durable_run_errors(local_dbos: None) -> None:
    """A run id nobody started, and a run of an agent no worker registered, fail typed."""

    async def failures() -> list[str]:
        runs = DurableRuns()
        messages = []
        for run_id in ("nobody-started-this", await runs.start("unregistered", "Go.")):
            with pytest.raises(DurableRunError) as caught:
                await runs.result(run_id, timeout_s=30)
            assert caught.value.run_id == run_id
            messages.append(str(caught.value))
        return messages

    unknown, unregistered = asyncio.run(failures())
    assert "nobody-started-this" in unknown
    assert "no agent is registered as 'unregistered'" in unregistered


def test_a_replay_reuses_every_recorded_step_in_its_place(local_dbos: None) -> None:
    """A fork of a finished run from after its last step re-executes the workflow on recorded
    steps only: parallel tool calls that finished out of order get their own results back,
    no tool runs again, and the run is the same."""

    async def original_and_replay() -> tuple[RunResult, RunResult]:
        runs = DurableRuns()
        run_id = await runs.start("scripted-parallel", "Go.", stream_events=False)
        original = await runs.result(run_id, timeout_s=30)
        steps = await DBOS.list_workflow_steps_async(run_id)
        fork = await DBOS.fork_workflow_async(run_id, max(s["function_id"] for s in steps) + 1)
        replay = await runs.result(fork.get_workflow_id(), timeout_s=30)
        return original, replay

    executed.clear()
    original, replay = asyncio.run(original_and_replay())
    assert executed == {"a": 1, "b": 1, "c": 1, "d": 1}
    assert replay.messages == original.messages and replay.trace == original.trace
    results = [p for m in replay.messages for p in m.parts if p.type == "tool_result"]
    assert [r.content for r in results] == [
        "a waited 0.05 s",
        "b waited 0.03 s",
        "c waited 0.0 s",
        "d waited 0.0 s",
    ]


# -- worker processes ----------------------------------------------------------------------------
class Workers:
    """Starts worker processes on one system database and kills them all at the end."""

    def __init__(self, url: str, log: Path) -> None:
        self.url = url
        self.log = log
        self.started: list[subprocess.Popen[str]] = []

    def start(
        self, executor_id: str, *args: str, slow_call: int | None = None
    ) -> subprocess.Popen[str]:
        env = {**os.environ, "FSM_DBOS_LOG": str(self.log)}
        env["PYTHONPATH"] = os.pathsep.join([str(WORKER.parent), env.get("PYTHONPATH", "")])
        if slow_call is not None:
            env["FSM_DBOS_SLOW_CALL"] = str(slow_call)
        process = subprocess.Popen(
            [sys.executable, str(WORKER), self.url, executor_id, *args],
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.started.append(process)
        assert process.stdout is not None
        assert process.stdout.readline().strip() == "ready", "the worker did not start"
        return process

    def lines(self) -> list[list[str]]:
        return [line.split() for line in self.log.read_text().splitlines()]

    def wait_for(self, predicate: Callable[[list[list[str]]], bool], timeout_s: float = 30) -> None:
        deadline = time.monotonic() + timeout_s
        while not predicate(self.lines()):
            assert time.monotonic() < deadline, "the workers did not get there in time"
            time.sleep(0.02)

    def close(self) -> None:
        for process in self.started:
            if process.poll() is None:
                process.terminate()
        for process in self.started:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            if process.stdout is not None:
                process.stdout.close()


def _kill(process: subprocess.Popen[str]) -> None:
    process.kill()  # SIGKILL: no shutdown of any kind
    process.wait()


@pytest.fixture
def sqlite_workers(tmp_path: Path) -> Iterator[Workers]:
    log = tmp_path / "effects.log"
    log.touch()
    workers = Workers(f"sqlite:///{tmp_path / 'system.sqlite'}", log)
    yield workers
    workers.close()


def _client(url: str) -> DBOSClient:
    return DBOSClient(system_database_url=url)


def _baseline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, make: Callable[[], Agent[None]], run_id: str
) -> RunResult:
    """The uninterrupted local run (its effects go to a log of their own)."""
    monkeypatch.setenv("FSM_DBOS_LOG", str(tmp_path / "baseline.log"))
    agent = make()
    agent.runtime = Runtime(new_id=lambda: run_id)
    return agent.run_sync("Go.")


def test_a_killed_worker_s_run_is_recovered_without_rerunning_finished_steps(
    sqlite_workers: Workers, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGKILL inside the third model call of a four-tool run; a new worker process recovers
    the run: the finished model and tool steps are replayed, not run again (each tool effect
    is in the log once), only the interrupted call is made again, and the result equals an
    uninterrupted run's."""
    workers = sqlite_workers
    first = workers.start("w1", "--queue", "runs", slow_call=3)
    client = _client(workers.url)
    runs = DurableRuns(client)
    run_id = asyncio.run(runs.start("steps", "Go.", queue="runs", run_id="crash-1"))
    workers.wait_for(lambda lines: ["model", "2"] in lines)  # the slow third call has begun
    _kill(first)
    assert ["tool", run_id, "3", "0"] not in workers.lines()
    workers.start("w1")  # the same executor id: it recovers its pending runs on launch
    result = asyncio.run(runs.result(run_id, timeout_s=30))
    client.destroy()

    baseline = _baseline(tmp_path, monkeypatch, dbos_worker.steps_agent, run_id)
    _same_run(result, baseline)
    assert result.ok and result.output == "all recorded"
    lines = workers.lines()
    effects = [line[2] for line in lines if line[0] == "tool"]
    assert effects == ["1", "2", "3", "4"]  # every effect once, in order
    calls = Counter(line[1] for line in lines if line[0] == "model")
    assert calls == {"0": 1, "1": 1, "2": 2, "3": 1, "4": 1}  # only the killed call again


def test_a_run_waits_for_approval_across_a_worker_restart(sqlite_workers: Workers) -> None:
    """A run suspends for a human; its worker is killed and a new one started; the approval
    arrives from another process (a DBOSClient); the run resumes where it waited and ends.
    The approved transfer happens once and the event stream tells the story once."""
    workers = sqlite_workers
    first = workers.start("w1", "--queue", "runs")
    client = _client(workers.url)
    runs = DurableRuns(client)

    async def until_suspended() -> str:
        run_id = await runs.start("approval", "Pay Bob.", queue="runs", run_id="approve-1")
        status = await runs.status(run_id, timeout_s=30)
        assert status is not None and status.state is State.SUSPENDED
        assert [c.id for c in status.pending] == ["t1"]
        return run_id

    run_id = asyncio.run(until_suspended())
    _kill(first)
    workers.start("w1")

    async def approve() -> tuple[RunResult, list[Event]]:
        await runs.decide(run_id, {"nope": True})  # does not fit: refused, the run waits on
        await runs.decide(run_id, {"t1": True})
        result = await runs.result(run_id, timeout_s=30)
        return result, [e async for e in runs.events(run_id)]

    result, events = asyncio.run(approve())
    client.destroy()
    assert result.ok and result.output == "transferred"
    assert [line for line in workers.lines() if line[0] == "transfer"] == [
        ["transfer", run_id, "7"]
    ]
    kinds = Counter(e.type for e in events)
    assert kinds["suspended"] == 1 and kinds["final"] == 1 and kinds["tool_result"] == 1


# -- PostgreSQL: two workers drain a queue ---------------------------------------------------------
@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A fresh database on the server of FSM_AGENT_PG_DSN, dropped afterwards."""
    psycopg = pytest.importorskip("psycopg", reason="the [postgres] extra is not installed")
    try:
        admin = psycopg.connect(DSN, connect_timeout=2, autocommit=True)
    except psycopg.OperationalError as exc:
        pytest.skip(f"no PostgreSQL server answers at FSM_AGENT_PG_DSN ({exc})")
    name = f"fsm_dbos_{uuid.uuid4().hex[:12]}"
    admin.execute(f'CREATE DATABASE "{name}"')
    base = DSN.rsplit("/", 1)[0]
    try:
        yield f"{base}/{name}"
    finally:
        admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
        admin.close()


RUNS = 200
WORKER_CONCURRENCY = 8


@pytest.mark.postgres
def test_two_workers_drain_a_queue_and_a_killed_one_loses_nothing(
    postgres_url: str, tmp_path: Path
) -> None:
    """200 runs through one queue (at most 12 at once, 8 per worker) on two worker processes;
    one is SIGKILLed midway and comes back. Every run completes exactly once; no tool effect
    happens twice (a call cut short by the kill is reported to the model as an unknown
    outcome, not run again), and no worker ran more runs at once than its limit."""
    log = tmp_path / "effects.log"
    log.touch()
    workers = Workers(postgres_url, log)
    try:
        limits = ["--concurrency", "12", "--worker-concurrency", str(WORKER_CONCURRENCY)]
        first = workers.start("a", "--queue", "runs", *limits)
        workers.start("b")
        client = _client(postgres_url)
        runs = DurableRuns(client, polling_interval_s=0.2)
        ids = [f"bulk-{n}" for n in range(RUNS)]

        async def enqueue() -> None:
            for run_id in ids:
                await runs.start("bulk", "Go.", queue="runs", run_id=run_id, stream_events=False)

        asyncio.run(enqueue())
        workers.wait_for(lambda lines: len(lines) >= RUNS // 3, timeout_s=60)
        _kill(first)
        workers.start("a")

        async def collect() -> list[RunResult]:
            return [await runs.result(run_id, timeout_s=60) for run_id in ids]

        results = asyncio.run(collect())
        statuses = Counter(
            s.status for s in client.list_workflows(workflow_ids=ids, load_output=False)
        )
        client.destroy()
    finally:
        workers.close()
    assert statuses == {"SUCCESS": RUNS}
    assert all(r.ok and r.output == "done" for r in results)
    effects = Counter(line[1] for line in workers.lines() if line[0] == "tool")
    assert max(effects.values()) == 1
    unknown = {
        r.run_id
        for r in results
        if any("outcome unknown" in m.model_dump_json() for m in r.messages)
    }
    assert set(ids) - unknown <= set(effects)  # every run not cut short took effect
    assert max(int(line[3]) for line in workers.lines() if line[0] == "tool") <= WORKER_CONCURRENCY
    assert len({*unknown}) <= WORKER_CONCURRENCY  # only runs in flight on the killed worker
