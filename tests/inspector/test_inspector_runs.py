"""The inspector explaining runs, over real SQLite stores filled by scripted runs: the list's
task, model, times and ending; a run's timed moves and the message behind a question; one
answer per suspended run under concurrent posts; a stale resume failure that goes away; runs a
newer version wrote, listed and flagged; reading without the token where the operator allows
it; each state's detail."""

from __future__ import annotations

import asyncio
import os
import re
import socket
import sqlite3
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest

from fsm_agent import Agent, State, tool
from fsm_agent.inspector import Inspector, build
from fsm_agent.persistence import Durability, InMemoryCheckpointer, SQLiteCheckpointer
from fsm_agent.testing import ScriptedModel, fail, text, tool_call
from inspector_runs import delete_file, fill

TOKEN = "test-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def client(inspector: Inspector) -> httpx.AsyncClient:
    """An HTTP client speaking to the inspector's application in this process."""
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=inspector.app), base_url="http://127.0.0.1"
    )


def _approver(store: Any) -> Agent[Any, Any]:
    return Agent(
        ScriptedModel(
            [
                tool_call("delete_file", {"path": "build/old.log"}, text="The log is stale."),
                text("Deleted the old log."),
            ]
        ),
        tools=[delete_file],
        checkpointer=store,
    )


POLLS = 3_000
"""How many times (every 20 ms) a test asks for a run's state before it fails: a minute, far
longer than a resume takes on a loaded machine (ten seconds were once not enough)."""


async def _wait_for(http: httpx.AsyncClient, run_id: str, state: str) -> dict[str, Any]:
    for _ in range(POLLS):
        detail: dict[str, Any] = (await http.get(f"/api/runs/{run_id}", headers=AUTH)).json()
        if detail["state"] == state and not detail["resuming"]:
            return detail
        await asyncio.sleep(0.02)
    raise AssertionError(f"run {run_id} never reached {state}")


def test_the_list_shows_task_model_start_duration_and_ending(
    sqlite_store: SQLiteCheckpointer,
) -> None:
    """Each row carries the prompt's first line, the model's name, when the run started, how
    long it ran and a preview of its answer; the search box finds a run by its task."""

    async def main() -> None:
        filled = await fill(sqlite_store)
        inspector = build(sqlite_store, token=TOKEN)
        async with client(inspector) as http:
            rows = {
                r["run_id"]: r for r in (await http.get("/api/runs", headers=AUTH)).json()["runs"]
            }
            found = await http.get("/api/runs?q=build+DIRECTORY", headers=AUTH)
        inspector.close()
        done = rows[filled.finished]
        assert (done["task"], done["model"]) == ("Read the page.", "scripted")
        assert done["ending"] == "The page is hostile."
        loaded = sqlite_store.load(filled.finished)
        assert done["started_at"] == loaded.move_times[0]
        assert done["duration_s"] == pytest.approx(loaded.move_times[-1] - loaded.move_times[0])
        assert rows[filled.suspended]["task"] == "Clean up the build directory."
        assert [r["run_id"] for r in found.json()["runs"]] == [filled.suspended]

    asyncio.run(main())


def test_every_move_has_a_time_and_a_duration(sqlite_store: SQLiteCheckpointer) -> None:
    """A run saved move by move has a time per move, in order; each move after the first
    says how long after the previous one it was saved."""

    async def main() -> None:
        filled = await fill(sqlite_store)
        inspector = build(sqlite_store, token=TOKEN)
        async with client(inspector) as http:
            detail = (await http.get(f"/api/runs/{filled.finished}", headers=AUTH)).json()
        inspector.close()
        times = [m["at"] for m in detail["moves"]]
        assert None not in times and times == sorted(times)
        assert detail["moves"][0]["took_s"] is None
        for before, move in zip(detail["moves"], detail["moves"][1:], strict=False):
            assert move["took_s"] == pytest.approx(move["at"] - before["at"])
        assert detail["task"] == "Read the page." and detail["started_at"] == times[0]

    asyncio.run(main())


@pytest.mark.parametrize("make", [SQLiteCheckpointer, None])
def test_moves_saved_together_have_only_the_last_time(tmp_path: Path, make: Any) -> None:
    """With durability ``exit`` one checkpoint holds every move: only the resting move has a
    time (the others are not invented); the in-memory store says the same."""
    store = make(tmp_path / "runs.db") if make else InMemoryCheckpointer()
    agent = Agent(ScriptedModel([text("ok")]), checkpointer=store, durability=Durability.EXIT)
    result = agent.run_sync("go")
    loaded = store.load(result.run_id)
    assert len(loaded.move_times) == len(loaded.state.trace) > 1
    assert set(loaded.move_times[:-1]) == {None} and loaded.move_times[-1] == loaded.saved_at
    store.close()


def test_a_checkpoint_stored_before_moves_had_times_still_shows(
    sqlite_store: SQLiteCheckpointer,
) -> None:
    """A checkpoint whose moves carry no time (another store, or an older one) loads and is
    shown with its moves untimed."""

    class Untimed(InMemoryCheckpointer):
        """A store that keeps no move times."""

        def load(self, run_id: str) -> Any:
            """The latest checkpoint, without move times."""
            return replace(super().load(run_id), move_times=())

    old = Untimed()
    result = Agent(ScriptedModel([text("ok")]), checkpointer=old).run_sync("go")

    async def main() -> dict[str, Any]:
        inspector = build(old, token=TOKEN)
        async with client(inspector) as http:
            detail: dict[str, Any] = (
                await http.get(f"/api/runs/{result.run_id}", headers=AUTH)
            ).json()
            listed = (await http.get("/api/runs", headers=AUTH)).json()["runs"]
        inspector.close()
        assert listed[0]["started_at"] is None and listed[0]["duration_s"] is None
        return detail

    detail = asyncio.run(main())
    assert detail["moves"] and all(m["at"] is None for m in detail["moves"])
    assert detail["output"] == "ok"


def test_a_question_shows_the_model_message_that_led_to_the_call(
    sqlite_store: SQLiteCheckpointer,
) -> None:
    """Beside the approval, the page gets the text the model wrote with the call."""

    async def main() -> None:
        first = await _approver(sqlite_store).run("Clean up.")
        inspector = build(sqlite_store, token=TOKEN)
        async with client(inspector) as http:
            detail = (await http.get(f"/api/runs/{first.run_id}", headers=AUTH)).json()
        inspector.close()
        (question,) = detail["questions"]
        assert question["asked_by"] == "The log is stale."

    asyncio.run(main())


def test_concurrent_answers_resume_a_suspended_run_exactly_once(
    sqlite_store: SQLiteCheckpointer,
) -> None:
    """Twenty approvals posted at once, ten times over: each time exactly one is accepted
    (202), the others are refused (409), the tool runs once and the run ends with no failure."""

    async def one_round(http: httpx.AsyncClient, inspector: Inspector) -> None:
        inspector.agent = agent = _approver(sqlite_store)
        first = await agent.run("Clean up.")
        url = f"/api/runs/{first.run_id}"
        call_id = (await http.get(url, headers=AUTH)).json()["questions"][0]["call_id"]
        body = {"decisions": {call_id: {"decision": "allow"}}}
        posts = [http.post(f"{url}/decisions", json=body, headers=AUTH) for _ in range(20)]
        statuses = sorted(r.status_code for r in await asyncio.gather(*posts))
        assert statuses == [202] + [409] * 19
        done = await _wait_for(http, first.run_id, "done")
        assert done["resume_error"] is None and done["output"] == "Deleted the old log."
        assert done["tool_executions"] == 1

    async def main() -> None:
        inspector = build(sqlite_store, agent=_approver(sqlite_store), token=TOKEN)
        async with client(inspector) as http:
            for _ in range(10):
                await one_round(http, inspector)
        inspector.close()

    asyncio.run(main())


def test_a_failed_resume_is_shown_only_while_the_run_stays_where_it_failed(
    sqlite_store: SQLiteCheckpointer,
) -> None:
    """An answer the inspector's agent cannot resume (another definition) is refused at once
    (409, nothing stored); one whose resume then fails (its model raises) is reported on the
    run, and once the run is resumed elsewhere and ends, the page no longer says it failed."""

    @tool(needs_approval=True)
    def other_tool(path: str) -> str:
        """Not the tool the run was started with."""
        return path

    async def main() -> None:
        first = await _approver(sqlite_store).run("Clean up.")
        stranger = Agent(ScriptedModel([text("no")]), tools=[other_tool], checkpointer=sqlite_store)
        broken = Agent(
            ScriptedModel([fail(RuntimeError("the adapter broke"))]),
            tools=[delete_file],
            checkpointer=sqlite_store,
        )
        url = f"/api/runs/{first.run_id}"
        refusing = build(sqlite_store, agent=stranger, token=TOKEN)
        async with client(refusing) as http:
            call_id = (await http.get(url, headers=AUTH)).json()["questions"][0]["call_id"]
            body = {"decisions": {call_id: {"decision": "allow"}}}
            refused = await http.post(f"{url}/decisions", json=body, headers=AUTH)
            assert refused.status_code == 409 and "other tools" in refused.json()["error"]
        refusing.close()
        assert sqlite_store.load(first.run_id).state.state is State.SUSPENDED
        inspector = build(sqlite_store, agent=broken, token=TOKEN)
        async with client(inspector) as http:
            assert (await http.post(f"{url}/decisions", json=body, headers=AUTH)).status_code == 202
            for _ in range(POLLS):
                failed = (await http.get(url, headers=AUTH)).json()
                if failed["resume_error"] is not None:
                    break
                await asyncio.sleep(0.02)
            assert "RuntimeError: the adapter broke" in failed["resume_error"]
            finisher = Agent(
                ScriptedModel([text("Deleted the old log.")]),
                tools=[delete_file],
                checkpointer=sqlite_store,
            )
            await finisher.resume(first.run_id)
            done = (await http.get(url, headers=AUTH)).json()
        inspector.close()
        assert done["state"] == "done" and done["resume_error"] is None

    asyncio.run(main())


def _plant_unknown_state(path: str, run_id: str) -> None:
    with sqlite3.connect(path) as db:
        db.execute("UPDATE runs SET state = 'reviewing' WHERE run_id = ?", (run_id,))


def test_a_run_with_an_unknown_state_is_flagged_and_the_others_listed(
    sqlite_store: SQLiteCheckpointer,
) -> None:
    """A runs row holding a state this version does not know: the store lists it with the
    problem, the inspector shows every run (200, not 503) and can filter the flagged one."""

    async def main() -> None:
        filled = await fill(sqlite_store)
        _plant_unknown_state(sqlite_store.path, filled.finished)
        summaries = {s.run_id: s for s in sqlite_store.runs()}
        odd = summaries[filled.finished]
        assert odd.state is None and odd.problem is not None and "'reviewing'" in odd.problem
        assert summaries[filled.suspended].problem is None
        inspector = build(sqlite_store, token=TOKEN)
        async with client(inspector) as http:
            listed = await http.get("/api/runs", headers=AUTH)
            unknown = await http.get("/api/runs?state=unknown", headers=AUTH)
        inspector.close()
        assert listed.status_code == 200
        rows = {r["run_id"]: r for r in listed.json()["runs"]}
        assert rows[filled.suspended]["state"] == "suspended"
        assert rows[filled.finished]["state"] is None
        assert "reviewing" in rows[filled.finished]["problem"]
        assert [r["run_id"] for r in unknown.json()["runs"]] == [filled.finished]

    asyncio.run(main())


def test_runs_list_flags_a_run_it_cannot_read_and_lists_the_rest(
    sqlite_store: SQLiteCheckpointer,
) -> None:
    """``fsm-agent runs list`` prints every run, marks the unreadable one with ``?`` and what
    it could not read, warns once on stderr, and exits 0."""
    filled = asyncio.run(fill(sqlite_store))
    _plant_unknown_state(sqlite_store.path, filled.finished)
    done = subprocess.run(
        [sys.executable, "-m", "fsm_agent", "runs", "list", "--db", sqlite_store.path],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    (odd,) = [line for line in lines if line.startswith(filled.finished)]
    (fine,) = [line for line in lines if line.startswith(filled.suspended)]
    assert " ? " in odd and "suspended" in fine
    assert any("unknown state 'reviewing'" in line for line in lines)
    assert "1 run(s) marked ?" in done.stderr


def test_public_reading_needs_no_token_but_answering_does(sqlite_store: SQLiteCheckpointer) -> None:
    """With ``public_read`` the list, a run and its picture answer without the token (the SVG
    stands alone); an answer without the token is refused and changes nothing. Without it,
    reading needs the token."""

    async def main() -> None:
        filled = await fill(sqlite_store)
        open_one = build(sqlite_store, agent=filled.approver, token=TOKEN, public_read=True)
        closed = build(sqlite_store, token=TOKEN)
        async with client(open_one) as http, client(closed) as guarded:
            listed = await http.get("/api/runs")
            assert listed.status_code == 200 and listed.json()["public_read"] is True
            detail = await http.get(f"/api/runs/{filled.suspended}")
            assert detail.status_code == 200
            svg = await http.get(f"/api/runs/{filled.finished}/diagram.svg")
            assert svg.status_code == 200 and svg.text.lstrip().startswith("<?xml")
            call_id = detail.json()["questions"][0]["call_id"]
            body = {"decisions": {call_id: {"decision": "allow"}}}
            posted = await http.post(f"/api/runs/{filled.suspended}/decisions", json=body)
            assert posted.status_code == 401
            for path in ("/api/runs", f"/api/runs/{filled.finished}/diagram.svg"):
                assert (await guarded.get(path)).status_code == 401
        open_one.close()
        closed.close()
        assert sqlite_store.load(filled.suspended).state.state is State.SUSPENDED

    asyncio.run(main())


def test_each_state_has_a_detail_picture_and_page(sqlite_store: SQLiteCheckpointer) -> None:
    """``/api/states/NAME.svg`` draws the state's rows; ``/states/NAME`` is its page; an
    unknown state answers 404 with the states' names, a terminal one 404 saying no row
    leaves it."""

    async def main() -> None:
        inspector = build(sqlite_store, token=TOKEN)
        async with client(inspector) as http:
            svg = await http.get("/api/states/calling.svg", headers=AUTH)
            page = await http.get("/states/calling")
            missing = await http.get("/api/states/nowhere.svg", headers=AUTH)
            terminal = await http.get("/api/states/done.svg", headers=AUTH)
        inspector.close()
        assert terminal.status_code == 404 and "no rows leave it" in terminal.json()["error"]
        assert svg.status_code == 200 and "<title>calling</title>" in svg.text
        assert page.status_code == 200 and "app.js" in page.text
        assert missing.status_code == 404 and "dispatching" in missing.json()["error"]

    asyncio.run(main())


def test_a_suspended_run_is_not_drawn_as_ended(sqlite_store: SQLiteCheckpointer) -> None:
    """The picture of a run waiting for a human marks no state as where it ended."""

    async def main() -> None:
        filled = await fill(sqlite_store)
        inspector = build(sqlite_store, token=TOKEN)
        async with client(inspector) as http:
            svg = (await http.get(f"/api/runs/{filled.suspended}/diagram.svg", headers=AUTH)).text
        inspector.close()
        assert "<title>suspended</title>" in svg and ">ended:" not in svg

    asyncio.run(main())


def test_a_run_whose_checkpoint_a_newer_version_wrote_is_flagged_not_fatal(
    sqlite_store: SQLiteCheckpointer,
) -> None:
    """When the checkpoint itself holds an unknown state, the list still answers (the run
    flagged with why), and the run's own page says this run cannot be read (422, not 503)."""

    async def main() -> None:
        filled = await fill(sqlite_store)
        _plant_unknown_state(sqlite_store.path, filled.finished)
        with sqlite3.connect(sqlite_store.path) as db:
            db.execute(
                'UPDATE checkpoints SET body = replace(body, \'"state":"done"\', '
                '\'"state":"reviewing"\') WHERE run_id = ?',
                (filled.finished,),
            )
            db.execute("UPDATE runs SET state = 'done' WHERE run_id = ?", (filled.finished,))
        inspector = build(sqlite_store, token=TOKEN)
        async with client(inspector) as http:
            listed = await http.get("/api/runs", headers=AUTH)
            shown = await http.get(f"/api/runs/{filled.finished}", headers=AUTH)
        inspector.close()
        assert listed.status_code == 200
        rows = {r["run_id"]: r for r in listed.json()["runs"]}
        assert "cannot be read" in rows[filled.finished]["problem"]
        assert rows[filled.suspended]["problem"] is None
        assert shown.status_code == 422 and "this run cannot be read" in shown.json()["error"]

    asyncio.run(main())


def test_the_command_serves_public_reading_when_asked(sqlite_store: SQLiteCheckpointer) -> None:
    """``fsm-agent inspect STORE --public-read``: the list answers without the token."""
    filled = asyncio.run(fill(sqlite_store))
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = ["inspect", sqlite_store.path, "--public-read", "--port", str(port)]
    process = subprocess.Popen(
        [sys.executable, "-m", "fsm_agent", *command],
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert process.stderr is not None
        line = process.stderr.readline()
        assert re.search(rf"http://127\.0\.0\.1:{port}/#token=\S+", line), line
        listed = None
        for _ in range(200):
            try:
                listed = httpx.get(f"http://127.0.0.1:{port}/api/runs")
                break
            except httpx.ConnectError:
                time.sleep(0.05)
        assert listed is not None and listed.status_code == 200
        assert {r["run_id"] for r in listed.json()["runs"]} == {filled.finished, filled.suspended}
    finally:
        process.terminate()
        process.wait(timeout=10)
        if process.stderr is not None:
            process.stderr.close()
