"""Scale-out on DBOS: runs per second through a queue with one and two worker processes, and
the per-step cost of running as a DBOS workflow against a local run, as ratios.

*Throughput*: worker processes (this script with ``--worker``) serve one queue (at most
``--worker-concurrency`` runs at once each); ``--runs`` short runs (one tool call, then the
answer, on a model that answers instantly) are enqueued through a ``DBOSClient`` and the clock
stops when every result is in. Each trial gets a fresh database. *Per step*: one run of
``--steps`` tool-calling steps in this process, as a DBOS workflow (each step is a model step
and a tool step, plus the tool's intent step as it is not idempotent) and locally, with and
without streaming its events.

The system database is the PostgreSQL server of ``FSM_AGENT_PG_DSN`` (default
postgresql://postgres@127.0.0.1:5432/test; a scratch database is created and dropped) or, with
``--sqlite`` or when no server answers, a SQLite file.

    python benchmarks/scale_out.py [--runs 200] [--steps 100] [--worker-concurrency 16] [--sqlite]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dbos import DBOS, DBOSClient, DBOSConfig

from fsm_agent import Agent, ModelRequest, ModelResponse, Policy, Role, tool
from fsm_agent.durable import DurableRuns, declare_queue, register_agent
from fsm_agent.testing import text, tool_call

DSN = os.environ.get("FSM_AGENT_PG_DSN", "postgresql://postgres@127.0.0.1:5432/test")
QUEUE = "bench"


@tool
def look(n: int) -> str:
    """Look something up."""
    return f"result {n}: " + "lorem ipsum " * 8


class Looping:
    """Calls ``look`` ``steps`` times, then answers (its position comes from the request, so
    a recovered workflow would pick up the right turn)."""

    def __init__(self, steps: int) -> None:
        self.steps = steps

    @property
    def name(self) -> str:
        return "looping"

    @property
    def context_window(self) -> int | None:
        return None

    async def complete(self, request: ModelRequest) -> ModelResponse:
        turn = sum(1 for m in request.messages if m.role is Role.ASSISTANT)
        if turn >= self.steps:
            return text("done")  # type: ignore[return-value]
        return tool_call("look", {"n": turn}, id=f"c{turn}")  # type: ignore[return-value]


def _agent(steps: int) -> Agent[None]:
    return Agent(Looping(steps), tools=[look], policy=Policy(max_steps=steps + 5))


def _config(url: str, executor_id: str) -> DBOSConfig:
    return {
        "name": "fsm-agent-bench",
        "system_database_url": url,
        "executor_id": executor_id,
        "application_version": "bench",
        "log_level": "WARNING",
        "notification_listener_polling_interval_sec": 0.01,
    }


def _register(steps: int) -> None:
    register_agent("short", lambda: _agent(1))
    register_agent("long", lambda: _agent(steps))


async def _serve(url: str, executor_id: str, worker_concurrency: int) -> None:
    _register(1)
    DBOS(config=_config(url, executor_id))
    DBOS.launch()
    await declare_queue(QUEUE, worker_concurrency=worker_concurrency, polling_interval_s=0.01)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    print("ready", flush=True)
    await stop.wait()
    DBOS.destroy()


@contextmanager
def _database(sqlite: bool, directory: Path) -> Iterator[str]:
    """A fresh system database URL, removed afterwards."""
    if sqlite:
        yield f"sqlite:///{directory / f'{uuid.uuid4().hex}.sqlite'}"
        return
    import psycopg

    name = f"fsm_bench_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(DSN, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
        try:
            yield f"{DSN.rsplit('/', 1)[0]}/{name}"
        finally:
            admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


def _throughput(url: str, workers: int, runs: int, worker_concurrency: int) -> float:
    """Runs per second through the queue with ``workers`` worker processes."""
    started: list[subprocess.Popen[str]] = []
    try:
        for index in range(workers):
            command = [sys.executable, __file__, "--worker", url, f"w{index}"]
            command += ["--worker-concurrency", str(worker_concurrency)]
            process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
            started.append(process)
            assert process.stdout is not None
            assert process.stdout.readline().strip() == "ready", "the worker did not start"
        client = DBOSClient(system_database_url=url)
        collector = DurableRuns(client, polling_interval_s=0.01)

        async def drain() -> float:
            ids = [f"r{n}" for n in range(runs)]
            begin = time.perf_counter()
            for run_id in ids:
                await collector.start(
                    "short", "go", queue=QUEUE, run_id=run_id, stream_events=False
                )
            for run_id in ids:
                assert (await collector.result(run_id, timeout_s=300)).ok
            return runs / (time.perf_counter() - begin)

        rate = asyncio.run(drain())
        client.destroy()
        return rate
    finally:
        for process in started:
            process.terminate()
            process.wait()
            if process.stdout is not None:
                process.stdout.close()


def _per_step(url: str, steps: int, rounds: int) -> dict[str, float]:
    """Microseconds per step (best of ``rounds``): local, and on DBOS with and without events."""
    _register(steps)
    DBOS(config=_config(url, "in-process"))
    DBOS.launch()
    runs = DurableRuns(polling_interval_s=0.001)

    async def timed(label: str, n: int) -> float:
        begin = time.perf_counter()
        if label == "local":
            result = await _agent(steps).run("go")
        else:
            run_id = await runs.start(
                "long", "go", run_id=f"{label}-{n}", stream_events=label == "events"
            )
            result = await runs.result(run_id)
        assert result.ok
        return (time.perf_counter() - begin) / steps * 1e6

    async def measure() -> dict[str, float]:
        return {
            label: min([await timed(label, n) for n in range(rounds)])
            for label in ("local", "dbos", "events")
        }

    try:
        return asyncio.run(measure())
    finally:
        DBOS.destroy()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--worker-concurrency", type=int, default=16)
    parser.add_argument("--sqlite", action="store_true", help="SQLite instead of PostgreSQL")
    parser.add_argument("--worker", nargs=2, metavar=("URL", "EXECUTOR_ID"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is not None:
        asyncio.run(_serve(*args.worker, args.worker_concurrency))
        return
    sqlite = args.sqlite
    if not sqlite:
        try:
            import psycopg

            psycopg.connect(DSN, connect_timeout=2).close()
        except Exception as exc:  # no driver or no server: measure on SQLite
            print(f"PostgreSQL unavailable ({exc}); using SQLite")
            sqlite = True
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        rates = {}
        for workers in (1, 2):
            with _database(sqlite, directory) as url:
                rates[workers] = _throughput(url, workers, args.runs, args.worker_concurrency)
        with _database(sqlite, directory) as url:
            micros = _per_step(url, args.steps, args.rounds)
    database = "SQLite" if sqlite else "PostgreSQL"
    print(f"system database: {database}; {args.runs} runs, {args.steps}-step runs per step")
    for workers, rate in rates.items():
        print(f"  {workers} worker(s)   {rate:8.1f} runs/s   {rate / rates[1]:5.2f}× one worker")
    for label, value in micros.items():
        print(f"  {label:<7} {value:9.1f} µs/step   {value / micros['local']:6.1f}× local")


if __name__ == "__main__":
    main()
