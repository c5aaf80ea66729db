"""The inspector's HTTP API over a real SQLite store filled by scripted runs: the run list and
its filters, one run's detail and drawn path, the token on every request, answering a
suspended run (read-only without an agent, resumed with one), redaction, and the command."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from fsm_agent import State
from fsm_agent.diagrams import RunPath
from fsm_agent.inspector import REDACTED, Inspector, build, redact
from fsm_agent.inspector.app import SECURITY_HEADERS
from fsm_agent.inspector.views import run_path
from fsm_agent.persistence import Checkpointer, SQLiteCheckpointer
from inspector_runs import HOSTILE, FilledStore, Gate, fill, gated_agent, gated_approver
from postgres_store import DSN, postgres_checkpointer

TOKEN = "test-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def client(inspector: Inspector) -> httpx.AsyncClient:
    """An HTTP client speaking to the inspector's application in this process."""
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=inspector.app), base_url="http://127.0.0.1"
    )


async def _session(store: Checkpointer, *, answer: bool) -> AsyncIterator[Any]:
    filled = await fill(store)
    inspector = build(store, agent=filled.approver if answer else None, token=TOKEN)
    async with client(inspector) as http:
        yield filled, http
    inspector.close()


def run(store: Checkpointer, test: Any, *, answer: bool = False) -> None:
    """Fill ``store``, start an inspector on it, and run ``test(filled, http)``."""

    async def main() -> None:
        async for filled, http in _session(store, answer=answer):
            await test(filled, http)

    asyncio.run(main())


def test_every_api_request_needs_the_token(sqlite_store: SQLiteCheckpointer) -> None:
    """Without the token, or with a wrong one, the API answers 401 and shows nothing."""

    async def test(filled: FilledStore, http: httpx.AsyncClient) -> None:
        for path in ("/api/runs", f"/api/runs/{filled.finished}"):
            assert (await http.get(path)).status_code == 401
            wrong = await http.get(path, headers={"Authorization": "Bearer nope"})
            assert wrong.status_code == 401 and filled.finished not in wrong.text
        posted = await http.post(
            f"/api/runs/{filled.suspended}/decisions",
            json={"decisions": {}},
            headers={"Authorization": "Bearer nope"},
        )
        assert posted.status_code == 401

    run(sqlite_store, test, answer=True)


def test_the_run_list_shows_state_stop_reason_steps_and_usage(
    sqlite_store: SQLiteCheckpointer,
) -> None:
    """Both runs are listed with their position, steps and usage; filters narrow the list."""

    async def test(filled: FilledStore, http: httpx.AsyncClient) -> None:
        listed = (await http.get("/api/runs", headers=AUTH)).json()
        rows = {row["run_id"]: row for row in listed["runs"]}
        assert set(rows) == {filled.finished, filled.suspended}
        done, waiting = rows[filled.finished], rows[filled.suspended]
        assert (done["state"], done["stop_reason"], done["steps"]) == ("done", "completed", 2)
        assert done["usage"]["requests"] == 2 and done["usage"]["input_tokens"] == 20
        assert (waiting["state"], waiting["waiting"]) == ("suspended", 1)
        assert listed["can_answer"] is False
        only = (await http.get("/api/runs?state=suspended", headers=AUTH)).json()["runs"]
        assert [row["run_id"] for row in only] == [filled.suspended]
        found = (await http.get("/api/runs?q=COMPLETED", headers=AUTH)).json()["runs"]
        assert [row["run_id"] for row in found] == [filled.finished]
        part = filled.suspended[-8:]
        found = (await http.get(f"/api/runs?q={part}", headers=AUTH)).json()["runs"]
        assert [row["run_id"] for row in found] == [filled.suspended]

    run(sqlite_store, test)


def test_a_run_shows_its_moves_messages_tool_calls_and_path(
    sqlite_store: SQLiteCheckpointer,
) -> None:
    """The detail holds every stored move with counters, the thread, the tool call with its
    (hostile) result as plain data, and visit counts that agree with the moves."""

    async def test(filled: FilledStore, http: httpx.AsyncClient) -> None:
        detail = (await http.get(f"/api/runs/{filled.finished}", headers=AUTH)).json()
        stored = sqlite_store.load(filled.finished).state
        assert len(detail["moves"]) == len(stored.trace)
        assert [m["dest"] for m in detail["moves"]] == [m.dest.value for m in stored.trace]
        assert detail["moves"][-1]["dest"] == "done"
        assert detail["moves"][2]["counters"]["steps"] == 1
        assert detail["state_visits"]["dispatching"] == 1
        assert detail["state_visits"]["calling"] == 2
        (call,) = detail["tool_calls"]
        assert call["name"] == "fetch_page" and HOSTILE in call["result"]
        roles = [m["role"] for m in detail["messages"]]
        assert roles[0] in ("system", "user") and roles[-1] == "assistant"
        assert detail["output"] == "The page is hostile." and detail["questions"] == []

    run(sqlite_store, test)


def test_the_diagram_draws_the_run_path_with_counts(sqlite_store: SQLiteCheckpointer) -> None:
    """The SVG names every state and carries the run's counts (calling was entered twice)."""

    async def test(filled: FilledStore, http: httpx.AsyncClient) -> None:
        response = await http.get(f"/api/runs/{filled.finished}/diagram.svg", headers=AUTH)
        assert response.headers["content-type"] == "image/svg+xml"
        svg = response.text
        for state in State:
            assert f"<title>{state.value}</title>" in svg
        assert "×2" in svg and "ended: completed" in svg

    run(sqlite_store, test)


def test_a_run_in_flight_is_drawn_without_a_final_state(sqlite_store: SQLiteCheckpointer) -> None:
    """While the run waits in ``dispatching`` its path is drawn but no state reads "ended"."""
    gate = Gate()
    agent = gated_agent(sqlite_store, gate)

    async def main() -> None:
        task = asyncio.create_task(agent.run("Build."))
        await gate.reached()
        (summary,) = sqlite_store.runs()
        assert summary.state is State.DISPATCHING
        inspector = build(sqlite_store, token=TOKEN)
        async with client(inspector) as http:
            svg = (await http.get(f"/api/runs/{summary.run_id}/diagram.svg", headers=AUTH)).text
            assert "<title>dispatching</title>" in svg and "×1" in svg
            assert ">ended:" not in svg
            gate.open()
            await task
            svg = (await http.get(f"/api/runs/{summary.run_id}/diagram.svg", headers=AUTH)).text
            assert ">ended: completed</text>" in svg
        inspector.close()

    asyncio.run(main())


def test_the_path_read_from_a_checkpoint_equals_the_one_read_from_events(
    sqlite_store: SQLiteCheckpointer,
) -> None:
    """``run_path`` over the stored moves is what the event stream of the same run gives."""
    from fsm_agent import Agent
    from fsm_agent.testing import ScriptedModel, text, tool_call
    from inspector_runs import fetch_page

    agent = Agent(
        ScriptedModel([tool_call("fetch_page", {"url": "u"}), text("ok")]),
        tools=[fetch_page],
        checkpointer=sqlite_store,
    )

    async def main() -> list[Any]:
        return [event async for event in agent.run_stream("go")]

    events = asyncio.run(main())
    stored = sqlite_store.load(events[-1].run_id).state
    assert run_path(stored) == RunPath.from_events(events)


def test_without_an_agent_answering_is_refused_and_changes_nothing(
    sqlite_store: SQLiteCheckpointer,
) -> None:
    """A read-only inspector answers 409 with what to do, and the run stays suspended."""

    async def test(filled: FilledStore, http: httpx.AsyncClient) -> None:
        detail = (await http.get(f"/api/runs/{filled.suspended}", headers=AUTH)).json()
        (question,) = detail["questions"]
        assert question["tool"] == "delete_file" and detail["can_answer"] is False
        body = {"decisions": {question["call_id"]: {"decision": "allow"}}}
        posted = await http.post(f"/api/runs/{filled.suspended}/decisions", json=body, headers=AUTH)
        assert posted.status_code == 409 and "--agent" in posted.json()["error"]
        assert sqlite_store.load(filled.suspended).state.state is State.SUSPENDED

    run(sqlite_store, test)


async def _wait_for(http: httpx.AsyncClient, run_id: str, state: str) -> dict[str, Any]:
    for _ in range(200):
        detail: dict[str, Any] = (await http.get(f"/api/runs/{run_id}", headers=AUTH)).json()
        if detail["state"] == state and not detail["resuming"]:
            return detail
        await asyncio.sleep(0.02)
    raise AssertionError(f"run {run_id} never reached {state}")


def test_approving_resumes_the_run_through_the_agent(sqlite_store: SQLiteCheckpointer) -> None:
    """Approve → the agent resumes the run, the tool runs, the run finishes."""

    async def test(filled: FilledStore, http: httpx.AsyncClient) -> None:
        detail = (await http.get(f"/api/runs/{filled.suspended}", headers=AUTH)).json()
        assert detail["can_answer"] is True
        call_id = detail["questions"][0]["call_id"]
        body = {"decisions": {call_id: {"decision": "allow"}}}
        posted = await http.post(f"/api/runs/{filled.suspended}/decisions", json=body, headers=AUTH)
        assert posted.status_code == 202
        done = await _wait_for(http, filled.suspended, "done")
        assert done["output"] == "Deleted the old log."
        assert done["tool_calls"][0]["result"] == "deleted build/old.log"
        again = await http.post(f"/api/runs/{filled.suspended}/decisions", json=body, headers=AUTH)
        assert again.status_code == 409  # the run is no longer suspended

    run(sqlite_store, test, answer=True)


def test_denying_sends_the_reason_to_the_model(sqlite_store: SQLiteCheckpointer) -> None:
    """Deny with a reason → the call gets the reason as an error result; the run goes on."""

    async def test(filled: FilledStore, http: httpx.AsyncClient) -> None:
        detail = (await http.get(f"/api/runs/{filled.suspended}", headers=AUTH)).json()
        call_id = detail["questions"][0]["call_id"]
        body = {"decisions": {call_id: {"decision": "deny", "text": "keep the logs"}}}
        posted = await http.post(f"/api/runs/{filled.suspended}/decisions", json=body, headers=AUTH)
        assert posted.status_code == 202
        done = await _wait_for(http, filled.suspended, "done")
        (call,) = done["tool_calls"]
        assert call["is_error"] is True and "keep the logs" in call["result"]

    run(sqlite_store, test, answer=True)


@pytest.mark.parametrize(
    "body",
    [
        {"nothing": 1},
        {"decisions": {"c": "allow"}},
        {"decisions": {"c": {"decision": "maybe"}}},
        {"decisions": {"c": {"decision": "deny", "text": 3}}},
    ],
)
def test_malformed_decisions_are_refused_before_anything_runs(
    sqlite_store: SQLiteCheckpointer, body: dict[str, Any]
) -> None:
    """Bad shapes answer 400; the run stays suspended."""

    async def test(filled: FilledStore, http: httpx.AsyncClient) -> None:
        posted = await http.post(f"/api/runs/{filled.suspended}/decisions", json=body, headers=AUTH)
        assert posted.status_code == 400
        assert sqlite_store.load(filled.suspended).state.state is State.SUSPENDED

    run(sqlite_store, test, answer=True)


def test_decisions_for_the_wrong_calls_are_refused(sqlite_store: SQLiteCheckpointer) -> None:
    """Decisions that do not fit the pending calls answer 409 with the resume error."""

    async def test(filled: FilledStore, http: httpx.AsyncClient) -> None:
        body = {"decisions": {"no-such-call": {"decision": "allow"}}}
        posted = await http.post(f"/api/runs/{filled.suspended}/decisions", json=body, headers=AUTH)
        assert posted.status_code == 409 and "no-such-call" in posted.json()["error"]
        assert sqlite_store.load(filled.suspended).state.state is State.SUSPENDED
        missing = await http.get("/api/runs/run_missing", headers=AUTH)
        assert missing.status_code == 404

    run(sqlite_store, test, answer=True)


def test_a_second_answer_while_the_run_resumes_is_refused(sqlite_store: SQLiteCheckpointer) -> None:
    """While a resume is under way a second answer gets 409 and starts nothing."""
    gate = Gate()
    agent = gated_approver(sqlite_store, gate)

    async def main() -> None:
        first = await agent.run("Deploy.")
        inspector = build(sqlite_store, agent=agent, token=TOKEN)
        url = f"/api/runs/{first.run_id}"
        async with client(inspector) as http:
            call_id = (await http.get(url, headers=AUTH)).json()["questions"][0]["call_id"]
            body = {"decisions": {call_id: {"decision": "allow"}}}
            assert (await http.post(f"{url}/decisions", json=body, headers=AUTH)).status_code == 202
            await gate.reached()
            detail = (await http.get(url, headers=AUTH)).json()
            assert detail["resuming"] is True and detail["state"] == "dispatching"
            again = await http.post(f"{url}/decisions", json=body, headers=AUTH)
            assert again.status_code == 409 and "already being resumed" in again.json()["error"]
            gate.open()
            done = await _wait_for(http, first.run_id, "done")
            assert done["output"] == "Deployed." and done["resume_error"] is None
        inspector.close()

    asyncio.run(main())


def test_the_list_is_cut_at_the_limit_and_a_broken_store_answers_503(
    sqlite_store: SQLiteCheckpointer,
) -> None:
    """``?limit=1`` lists the newest run only; a store that fails to read answers 503."""

    async def test(filled: FilledStore, http: httpx.AsyncClient) -> None:
        limited = (await http.get("/api/runs?limit=1", headers=AUTH)).json()["runs"]
        assert [row["run_id"] for row in limited] == [filled.suspended]
        assert (await http.get("/api/runs?limit=x", headers=AUTH)).status_code == 400
        sqlite_store.close()
        broken = await http.get("/api/runs", headers=AUTH)
        assert broken.status_code == 503 and "cannot be read" in broken.json()["error"]

    run(sqlite_store, test)


def test_pages_are_static_shells_with_a_strict_security_policy(
    sqlite_store: SQLiteCheckpointer,
) -> None:
    """The pages and script load without the token, carry the CSP, and hold no run data."""

    async def test(filled: FilledStore, http: httpx.AsyncClient) -> None:
        for path in ("/", f"/runs/{filled.finished}", "/static/app.js", "/static/style.css"):
            response = await http.get(path)
            assert response.status_code == 200
            for name, value in SECURITY_HEADERS.items():
                assert response.headers[name] == value
            assert filled.finished not in response.text
        assert (await http.get("/static/../views.py")).status_code == 404
        assert (await http.get("/static/views.py")).status_code == 404

    run(sqlite_store, test)


def test_secrets_are_redacted_from_everything_shown(
    sqlite_store: SQLiteCheckpointer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An API key from the environment, and key-shaped text, never reach the page."""
    monkeypatch.setenv("ACME_API_KEY", "acme-secret-value-42")
    leaked = "key acme-secret-value-42, sk-abcdefghijklmnop1234, Bearer abc.def.ghi123"
    assert redact(leaked).count(REDACTED) == 3
    assert redact("postgresql://me:hunter22@db/x") == f"postgresql://{REDACTED}@db/x"

    from fsm_agent import Agent, tool
    from fsm_agent.testing import ScriptedModel, text, tool_call

    @tool
    def whoami() -> str:
        """Tell who we are."""
        return leaked

    async def main() -> None:
        agent = Agent(
            ScriptedModel([tool_call("whoami", {}), text(leaked)]),
            tools=[whoami],
            checkpointer=sqlite_store,
        )
        result = await agent.run("who?")
        inspector = build(sqlite_store, token=TOKEN)
        async with client(inspector) as http:
            shown = (await http.get(f"/api/runs/{result.run_id}", headers=AUTH)).text
        inspector.close()
        assert "acme-secret-value-42" not in shown and "sk-abcdefghijklmnop1234" not in shown
        assert "abc.def.ghi123" not in shown and REDACTED in shown
        named = Inspector(sqlite_store, token=TOKEN, store_name="postgresql://me:hunter22@db/runs")
        async with client(named) as http:
            listed = (await http.get("/api/runs", headers=AUTH)).json()
        named.close()
        assert listed["store"] == f"postgresql://{REDACTED}@db/runs"

    asyncio.run(main())


def test_secret_named_arguments_are_redacted_with_their_values(
    sqlite_store: SQLiteCheckpointer,
) -> None:
    """A tool call's arguments named like secrets (``api_key``, ``password``, ``token``, …) are
    shown masked, in the run's JSON and its pending question, as is such a pair in a tool's
    text; the other arguments are shown as they are."""
    from fsm_agent import Agent, tool
    from fsm_agent.testing import ScriptedModel, tool_call

    secrets = {
        "api_key": "plain-api-value-1",
        "password": "hunter2hunter2",
        "token": "tok-plain-value-3",
        "clientSecret": "client-plain-value-4",
        "auth": {"user": "me", "pin": "pin-plain-value-0"},
    }

    @tool
    def log_in(
        api_key: str, password: str, token: str, clientSecret: str, auth: dict[str, str], city: str
    ) -> str:
        """Log in (scripted: it echoes a JSON body with a token)."""
        return '{"city": "Oslo", "session_token": "tok-echoed-value-5"}'

    @tool(needs_approval=True)
    def pay(amount: int, password: str) -> str:
        """Pay (a human approves it first)."""
        return "paid"

    async def main() -> None:
        agent = Agent(
            ScriptedModel(
                [
                    tool_call("log_in", {**secrets, "city": "Oslo"}),
                    tool_call("pay", {"amount": 5, "password": "pay-plain-value-6"}),
                ]
            ),
            tools=[log_in, pay],
            checkpointer=sqlite_store,
        )
        result = await agent.run("log in and pay")
        assert result.state is State.SUSPENDED
        inspector = build(sqlite_store, token=TOKEN)
        async with client(inspector) as http:
            response = await http.get(f"/api/runs/{result.run_id}", headers=AUTH)
            listed = (await http.get("/api/runs", headers=AUTH)).text
        inspector.close()
        shown = response.text
        for value in (
            "plain-api-value-1",
            "hunter2hunter2",
            "tok-plain-value-3",
            "client-plain-value-4",
            "pin-plain-value-0",
            "tok-echoed-value-5",
            "pay-plain-value-6",
        ):
            assert value not in shown and value not in listed, value
        detail = response.json()
        arguments = detail["tool_calls"][0]["arguments"]
        assert arguments == {
            "api_key": REDACTED,
            "password": REDACTED,
            "token": REDACTED,
            "clientSecret": REDACTED,
            "auth": REDACTED,
            "city": "Oslo",
        }
        assert '"city": "Oslo"' in detail["tool_calls"][0]["result"]
        assert detail["questions"][0]["arguments"] == {"amount": 5, "password": REDACTED}

    asyncio.run(main())


@pytest.mark.postgres
def test_a_postgres_store_is_listed_shown_and_answered() -> None:
    """The same pages over PostgreSQL: both runs listed, the finished one drawn, the suspended
    one approved and resumed to the end."""

    async def test(filled: FilledStore, http: httpx.AsyncClient) -> None:
        listed = (await http.get("/api/runs", headers=AUTH)).json()["runs"]
        assert {row["run_id"] for row in listed} == {filled.finished, filled.suspended}
        detail = (await http.get(f"/api/runs/{filled.finished}", headers=AUTH)).json()
        assert detail["state"] == "done" and HOSTILE in detail["tool_calls"][0]["result"]
        svg = await http.get(f"/api/runs/{filled.finished}/diagram.svg", headers=AUTH)
        assert "ended: completed" in svg.text
        url = f"/api/runs/{filled.suspended}"
        call_id = (await http.get(url, headers=AUTH)).json()["questions"][0]["call_id"]
        body = {"decisions": {call_id: {"decision": "allow"}}}
        assert (await http.post(f"{url}/decisions", json=body, headers=AUTH)).status_code == 202
        done = await _wait_for(http, filled.suspended, "done")
        assert done["output"] == "Deleted the old log."

    with postgres_checkpointer("fsm_inspect") as pg:
        run(pg, test, answer=True)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fsm_agent", "inspect", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_command_reports_bad_input_in_one_line(tmp_path: Path) -> None:
    """A missing store or an agent that cannot be loaded: one line on stderr, exit 2."""
    missing = _cli(str(tmp_path / "none.db"))
    assert missing.returncode == 2 and "no SQLite store" in missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1
    SQLiteCheckpointer(tmp_path / "runs.db").close()
    bad = _cli(str(tmp_path / "runs.db"), "--agent", "no_such_module_here:make")
    assert bad.returncode == 2 and "--agent: cannot import" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1


class _Served:
    """``fsm-agent inspect`` running in a subprocess (or ``script``, which serves the inspector
    and prints its address the same way): ``base`` and ``auth`` reach its API."""

    def __init__(self, *args: str, cwd: Path | None = None, script: Path | None = None) -> None:
        command = ["-m", "fsm_agent", "inspect", *args, "--port", "0"]
        self.process = subprocess.Popen(
            [sys.executable, *([str(script), *args] if script is not None else command)],
            stderr=subprocess.PIPE,
            text=True,
            cwd=cwd,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        try:  # the address is printed once it listens, with the free port it picked
            assert self.process.stderr is not None
            line = self.process.stderr.readline()
            found = re.search(r"http://127\.0\.0\.1:(\d+)/#token=(\S+)", line)
            assert found is not None, line
        except BaseException:
            self.close()
            raise
        self.base = f"http://127.0.0.1:{found.group(1)}"
        self.auth = {"Authorization": f"Bearer {found.group(2)}"}

    def get(self, path: str) -> Any:
        """The JSON of an authorised GET."""
        return httpx.get(self.base + path, headers=self.auth).json()

    def close(self) -> None:
        """Stop the command (killed if it does not stop within a minute)."""
        self.process.terminate()
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        if self.process.stderr is not None:
            self.process.stderr.close()


def test_the_command_serves_the_store_on_loopback_and_prints_the_token(
    sqlite_store: SQLiteCheckpointer,
) -> None:
    """``fsm-agent inspect STORE`` listens on 127.0.0.1 and prints the address with a fresh
    token, which the API then requires; without --agent it is read-only."""
    filled = asyncio.run(fill(sqlite_store))
    served = _Served(sqlite_store.path)
    try:
        listed = served.get("/api/runs")
        assert {row["run_id"] for row in listed["runs"]} == {filled.finished, filled.suspended}
        assert listed["can_answer"] is False
        assert httpx.get(f"{served.base}/api/runs").status_code == 401
    finally:
        served.close()


FACTORY = """
from fsm_agent import Agent, tool
from fsm_agent.testing import ScriptedModel, text


@tool(needs_approval=True)
def delete_file(path: str) -> str:
    \"\"\"Delete a file (a human approves it first).\"\"\"
    return f"deleted {path}"


def make() -> Agent:
    return Agent(ScriptedModel([text("Deleted the old log.")]), tools=[delete_file])
"""


def test_the_command_answers_through_the_agent_its_factory_builds(
    sqlite_store: SQLiteCheckpointer, tmp_path: Path
) -> None:
    """``--agent module:factory``: the factory's agent (given the store, as it has none)
    resumes the approved run to the end."""
    filled = asyncio.run(fill(sqlite_store))
    (tmp_path / "inspector_factory.py").write_text(FACTORY, encoding="utf-8")
    served = _Served(sqlite_store.path, "--agent", "inspector_factory:make", cwd=tmp_path)
    try:
        url = f"/api/runs/{filled.suspended}"
        call_id = served.get(url)["questions"][0]["call_id"]
        body = {"decisions": {call_id: {"decision": "allow"}}}
        posted = httpx.post(f"{served.base}{url}/decisions", json=body, headers=served.auth)
        assert posted.status_code == 202
        for _ in range(200):
            detail = served.get(url)
            if detail["state"] == "done":
                break
            time.sleep(0.05)
        why = {key: detail[key] for key in ("state", "stop_reason", "error", "resume_error")}
        assert detail["output"] == "Deleted the old log.", why
        assert detail["tool_calls"][0]["result"] == "deleted build/old.log"
    finally:
        served.close()


RACING_FACTORY = FACTORY.replace('[text("Deleted the old log.")]', '[text("Deleted.")] * 3')
"""The factory of an agent that may resume each of three runs."""

SERVE_POSTGRES = """
import sys

from fsm_agent.inspector import serve
from fsm_agent.persistence import PostgresCheckpointer
from inspector_factory import make

serve(PostgresCheckpointer(sys.argv[1], schema=sys.argv[2]), agent=make(), port=0)
"""


async def _waiting(store: Checkpointer, count: int) -> list[str]:
    """``count`` runs, each suspended on the approval of the call the factory's agent makes."""
    from fsm_agent import Agent
    from fsm_agent.testing import ScriptedModel, tool_call
    from inspector_runs import delete_file

    runs = []
    for n in range(count):
        model = ScriptedModel([tool_call("delete_file", {"path": f"build/{n}.log"})])
        agent = Agent(model, tools=[delete_file], checkpointer=store)
        runs.append((await agent.run(f"Clean up build {n}.")).run_id)
    return runs


def _race(inspectors: tuple[_Served, _Served], run_id: str) -> None:
    """Allow the run's call through one inspector and deny it through the other at once: one
    answer is taken, the other is told what was decided, and the run ends as the first said."""
    url = f"/api/runs/{run_id}"
    call_id = inspectors[0].get(url)["questions"][0]["call_id"]
    barrier = threading.Barrier(2)
    answers: dict[str, httpx.Response] = {}

    def post(inspector: _Served, decision: str) -> None:
        body = {"decisions": {call_id: {"decision": decision}}}
        barrier.wait()
        answers[decision] = httpx.post(
            f"{inspector.base}{url}/decisions", json=body, headers=inspector.auth, timeout=30
        )

    posts = [
        threading.Thread(target=post, args=(inspector, decision))
        for inspector, decision in zip(inspectors, ("allow", "deny"), strict=True)
    ]
    for thread in posts:
        thread.start()
    for thread in posts:
        thread.join()
    statuses = {decision: answer.status_code for decision, answer in answers.items()}
    assert sorted(statuses.values()) == [202, 409], statuses
    taken = "allow" if statuses["allow"] == 202 else "deny"
    refused = answers["deny" if taken == "allow" else "allow"].json()
    assert "already decided elsewhere" in refused["error"], refused
    said = refused["decided"][call_id]
    assert said.startswith(taken) or ("deleted" if taken == "allow" else "denied") in said, said
    for _ in range(200):
        detail = inspectors[0].get(url)
        if detail["state"] in ("done", "aborted"):
            break
        time.sleep(0.05)
    assert detail["state"] == "done", detail["error"]
    result = detail["tool_calls"][0]
    if taken == "allow":
        assert result["result"].startswith("deleted build/") and not result["is_error"]
    else:
        assert "denied in the inspector" in result["result"] and result["is_error"]
    for inspector in inspectors:
        assert inspector.get(url)["resume_error"] is None


def test_two_inspector_processes_over_one_store_take_one_answer(
    sqlite_store: SQLiteCheckpointer, tmp_path: Path
) -> None:
    """Two ``fsm-agent inspect`` processes over one SQLite store, one answering allow and the
    other deny at the same moment: one answer is taken (202), the other gets 409 saying what
    was decided, and the run goes on as the taken answer said."""
    runs = asyncio.run(_waiting(sqlite_store, 3))
    (tmp_path / "inspector_factory.py").write_text(RACING_FACTORY, encoding="utf-8")
    served = [_Served(sqlite_store.path, "--agent", "inspector_factory:make", cwd=tmp_path)]
    try:
        served.append(_Served(sqlite_store.path, "--agent", "inspector_factory:make", cwd=tmp_path))
        for run_id in runs:
            _race((served[0], served[1]), run_id)
    finally:
        for inspector in served:
            inspector.close()


@pytest.mark.postgres
def test_two_inspector_processes_over_one_postgres_store_take_one_answer(
    tmp_path: Path,
) -> None:
    """The same race over PostgreSQL: one answer taken, the other told what was decided."""
    (tmp_path / "inspector_factory.py").write_text(RACING_FACTORY, encoding="utf-8")
    script = tmp_path / "serve_postgres.py"
    script.write_text(SERVE_POSTGRES, encoding="utf-8")
    with postgres_checkpointer("fsm_inspect_race") as pg:
        runs = asyncio.run(_waiting(pg, 3))
        served = [_Served(DSN, pg.schema, cwd=tmp_path, script=script)]
        try:
            served.append(_Served(DSN, pg.schema, cwd=tmp_path, script=script))
            for run_id in runs:
                _race((served[0], served[1]), run_id)
        finally:
            for inspector in served:
                inspector.close()
