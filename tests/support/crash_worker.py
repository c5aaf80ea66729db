"""The process side of test_crash_safety: runs the durable scenario with a SQLite checkpointer,
SIGKILLs the run at a chosen boundary, and resumes it in a fresh process.

Usage: ``python crash_worker.py DIR MODE`` where MODE is ``checkpoint`` (kill after each
checkpoint in turn), ``any`` (after each write, effect records included), ``in-tool`` (kill
inside the non-idempotent charge, after its effect) or ``in-model`` (kill inside the model call
that follows the charge's tool turn, on the store itself, whose run makes a step's writes
together: what the store holds then is printed too). One process is started per run and per
resume (``os.fork`` from this worker, which imported fsm_agent once); the outside world (the
model's position, the tools' effects) is a log file that survives the kills. Prints one JSON
line per case.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path

from durable_scenario import PROMPT, RUN_ID, make_agent
from fsm_agent.errors import RunFinishedError, UnknownRunError
from fsm_agent.persistence import SQLiteCheckpointer
from fsm_agent.testing import CrashingCheckpointer


class Killing(CrashingCheckpointer):
    """SIGKILLs its own process right after the chosen write is stored."""

    def _wrote(self) -> None:
        self.writes += 1
        if self.writes == self.crash_after:
            os.kill(os.getpid(), signal.SIGKILL)


def _note(log: Path) -> Callable[[str], None]:
    def note(what: str) -> None:
        fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:
            os.write(fd, (what + "\n").encode())
        finally:
            os.close(fd)

    return note


def _seen(log: Path) -> list[str]:
    return log.read_text().split() if log.exists() else []


def _in_child(work: Callable[[], None]) -> int:
    """Run ``work`` in a forked process; its exit status (negative: killed by that signal)."""
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            work()
        except BaseException as exc:
            print(f"child failed: {exc!r}", file=sys.stderr)
            code = 3
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


def _first(db: Path, log: Path, crash_after: int, at: str, kill_in_tool: bool) -> None:
    store = SQLiteCheckpointer(db)
    crashing = Killing(store, crash_after, at="any" if at == "any" else "checkpoint")

    def die() -> None:
        os.kill(os.getpid(), signal.SIGKILL)

    agent = make_agent(crashing, _note(log), after_charge=die if kill_in_tool else None)
    agent.run_sync(PROMPT)


def _in_model(db: Path, log: Path, stored: Path) -> None:
    """Run on the store itself (no wrapper) and die inside the model call after the tool turn
    with the charge (the fourth), noting what the store holds then."""
    note = _note(log)

    def noted(what: str) -> None:
        note(what)
        if what == "model" and _seen(log).count("model") == 4:
            probe = SQLiteCheckpointer(db)
            state = probe.load(RUN_ID).state.state
            open_calls = [k for k, r in probe.effects(RUN_ID).items() if r.result is None]
            stored.write_text(json.dumps({"state": state.value, "open": open_calls}))
            os.kill(os.getpid(), signal.SIGKILL)

    make_agent(SQLiteCheckpointer(db), noted).run_sync(PROMPT)


def _resume(db: Path, log: Path, out: Path) -> None:
    store = SQLiteCheckpointer(db)
    agent = make_agent(store, _note(log), position=_seen(log).count("model"))
    try:
        result = asyncio.run(agent.resume(RUN_ID))
        state = result.run_state
    except UnknownRunError:  # killed before the first checkpoint: start again
        state = agent.run_sync(PROMPT).run_state
    except RunFinishedError:
        state = store.load(RUN_ID).state
    assert state is not None
    out.write_text(state.model_dump_json())


def main(directory: str, mode: str) -> None:
    root = Path(directory)
    baseline_db, baseline_log, baseline_out = root / "b.db", root / "b.log", root / "b.json"
    counting = root / "count"

    def baseline() -> None:
        store = CrashingCheckpointer(SQLiteCheckpointer(baseline_db), 10**9, at="any")
        agent = make_agent(store, _note(baseline_log))
        state = agent.run_sync(PROMPT).run_state
        assert state is not None
        baseline_out.write_text(state.model_dump_json())
        writes = store.writes if mode != "checkpoint" else len(state.trace)
        counting.write_text(str(writes))

    assert _in_child(baseline) == 0
    print(
        json.dumps({"baseline": json.loads(baseline_out.read_text()), "log": _seen(baseline_log)})
    )
    points = [0] if mode in ("in-tool", "in-model") else range(1, int(counting.read_text()) + 1)
    at = "any" if mode == "any" else "checkpoint"
    for crash_after in points:
        db, log, out = (
            root / f"{crash_after}.db",
            root / f"{crash_after}.log",
            root / f"{crash_after}.json",
        )
        stored = root / f"{crash_after}.stored.json"
        if mode == "in-model":
            first = _in_child(partial(_in_model, db, log, stored))
        else:
            first = _in_child(partial(_first, db, log, crash_after, at, mode == "in-tool"))
        second = _in_child(partial(_resume, db, log, out))
        case = {
            "crash_after": crash_after,
            "first": first,
            "second": second,
            "log": _seen(log),
            "state": json.loads(out.read_text()) if out.exists() else None,
            "stored": json.loads(stored.read_text()) if stored.exists() else None,
        }
        print(json.dumps(case), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
