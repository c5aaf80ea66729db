"""The inspector on compositions and forks, over a real SQLite store: a call of an agent tool
links to the child's run and the child's run names its parent's run and call; "fork from here"
is token-protected, refused by a read-only inspector and for a move that cannot be forked, and
creates a fork (continued by the inspector's agent) that links back to its original."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import httpx

from fsm_agent import Agent, Policy, Runtime, State, StopReason, tool
from fsm_agent.inspector import build
from fsm_agent.persistence import SQLiteCheckpointer
from fsm_agent.testing import ScriptedModel, text, tool_call

TOKEN = "test-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@tool
def search(query: str) -> str:
    """Search the archive."""
    return f"3 articles about {query}"


def serve(
    store: SQLiteCheckpointer,
    agent: Agent[Any, Any] | None,
    test: Callable[[httpx.AsyncClient], Awaitable[None]],
) -> None:
    """Run ``test`` against an inspector on ``store`` (read-only without ``agent``)."""

    async def main() -> None:
        inspector = build(store, agent=agent, token=TOKEN)
        transport = httpx.ASGITransport(app=inspector.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
            await test(http)
        inspector.close()

    asyncio.run(main())


def writer_with_researcher(store: SQLiteCheckpointer) -> Agent[Any, Any]:
    """A durable writer whose one tool is a researcher agent."""
    researcher = Agent(
        ScriptedModel([tool_call("search", {"query": "tides"}), text("Tides follow the moon.")]),
        tools=[search],
    )
    return Agent(
        ScriptedModel(
            [tool_call("research", {"task": "Why are there tides?"}, id="c1"), text("A piece.")]
        ),
        tools=[researcher.as_tool(name="research", description="Research one question.")],
        checkpointer=store,
        runtime=Runtime(),
    )


def test_an_agent_tool_call_links_to_the_child_run_and_back(
    sqlite_store: SQLiteCheckpointer,
) -> None:
    """The parent's call of an agent tool names the child's run, whose page names the parent's
    run and call, and the child's run is drawn on its own machine."""
    parent = asyncio.run(writer_with_researcher(sqlite_store).run("Write on tides."))

    async def test(http: httpx.AsyncClient) -> None:
        detail = (await http.get(f"/api/runs/{parent.run_id}", headers=AUTH)).json()
        (call,) = detail["tool_calls"]
        child_id = call["child_run_id"]
        assert call["name"] == "research" and child_id not in (None, parent.run_id)
        child = (await http.get(f"/api/runs/{child_id}", headers=AUTH)).json()
        assert child["parent"] == {"run_id": parent.run_id, "call_id": "c1"}
        assert child["task"] == "Why are there tides?" and child["state"] == "done"
        assert [c["name"] for c in child["tool_calls"]] == ["search"]
        assert detail["parent"] is None
        drawn = await http.get(f"/api/runs/{child_id}/diagram.svg", headers=AUTH)
        assert drawn.status_code in (200, 501)  # 501: Graphviz is not installed

    serve(sqlite_store, None, test)


def shop(store: SQLiteCheckpointer, *answers: str) -> Agent[Any, Any]:
    """A durable agent that answers ``answers`` (a fork's script); without, one search then an
    answer (the original's)."""
    turns = [text(a) for a in answers] or [
        tool_call("search", {"query": "tea"}),
        text("Tea: 3 articles."),
    ]
    return Agent(ScriptedModel(turns), tools=[search], checkpointer=store, runtime=Runtime())


def after_results(trace: Any) -> int:
    """The move after which the search's result is in the history."""
    return next(i + 1 for i, move in enumerate(trace) if move.source is State.DISPATCHING)


def test_forking_is_refused_without_token_read_only_or_for_a_bad_move(
    sqlite_store: SQLiteCheckpointer,
) -> None:
    """A fork needs the token (401) and an inspector with an agent (409); a malformed move is
    400, an unknown run 404, a move that ended the run or was not saved 409: none stores a run."""
    original = asyncio.run(shop(sqlite_store).run("Find tea."))
    at = after_results(original.trace)
    path = f"/api/runs/{original.run_id}/fork"

    async def read_only(http: httpx.AsyncClient) -> None:
        assert (await http.post(path, json={"at": at})).status_code == 401
        wrong = await http.post(path, json={"at": at}, headers={"Authorization": "Bearer x"})
        assert wrong.status_code == 401
        refused = await http.post(path, json={"at": at}, headers=AUTH)
        assert refused.status_code == 409 and "read-only" in refused.json()["error"]

    async def answering(http: httpx.AsyncClient) -> None:
        for body in ({"at": "3"}, {"at": 0}, {"at": True}, [], {}):
            assert (await http.post(path, json=body, headers=AUTH)).status_code == 400
        unknown = await http.post("/api/runs/nope/fork", json={"at": 1}, headers=AUTH)
        assert unknown.status_code == 404
        for move in (len(original.trace), 999):
            refused = await http.post(path, json={"at": move}, headers=AUTH)
            assert refused.status_code == 409, refused.text

    serve(sqlite_store, None, read_only)
    serve(sqlite_store, shop(sqlite_store), answering)
    assert [r.run_id for r in sqlite_store.runs()] == [original.run_id]


def test_fork_from_here_creates_a_fork_that_continues_and_links_back(
    sqlite_store: SQLiteCheckpointer,
) -> None:
    """Forking from a move stores a new run from the state after it, which the inspector's
    agent continues; its page names the original and the move, the original is unchanged."""
    original = asyncio.run(shop(sqlite_store).run("Find tea."))
    before = sqlite_store.load(original.run_id)
    at = after_results(original.trace)

    async def test(http: httpx.AsyncClient) -> None:
        shown = (await http.get(f"/api/runs/{original.run_id}", headers=AUTH)).json()
        assert shown["can_fork"] is True and shown["forked_from"] is None
        made = await http.post(f"/api/runs/{original.run_id}/fork", json={"at": at}, headers=AUTH)
        assert made.status_code == 201, made.text
        body = made.json()
        fork_id = body["run_id"]
        assert fork_id != original.run_id and body["page"] == f"/runs/{fork_id}"
        assert (body["forked_from"], body["forked_at"]) == (original.run_id, at)
        detail: dict[str, Any] = {}
        while detail.get("state") != "done" or detail.get("resuming"):
            await asyncio.sleep(0.01)  # the fork runs in the inspector's background task
            detail = (await http.get(f"/api/runs/{fork_id}", headers=AUTH)).json()
            assert detail.get("resume_error") is None, detail["resume_error"]
        assert detail["forked_from"] == {"run_id": original.run_id, "move": at}
        assert detail["output"] == "Tea, again." and len(detail["moves"]) > at

    serve(sqlite_store, shop(sqlite_store, "Tea, again."), test)
    assert sqlite_store.load(original.run_id) == before


def test_fork_from_here_by_a_changed_agent_is_refused_and_stores_nothing(
    sqlite_store: SQLiteCheckpointer,
) -> None:
    """An inspector whose agent is not the one that started the run (another system prompt)
    refuses "fork from here" with 409 naming the change, and stores no run that would wait
    for an agent that can continue it."""
    original = asyncio.run(shop(sqlite_store).run("Find tea."))
    at = after_results(original.trace)
    changed = shop(sqlite_store, "Tea, again.")
    changed.system_prompt = "Answer in French."

    async def test(http: httpx.AsyncClient) -> None:
        path = f"/api/runs/{original.run_id}/fork"
        refused = await http.post(path, json={"at": at}, headers=AUTH)
        assert refused.status_code == 409, refused.text
        assert "system_prompt" in refused.json()["error"]
        listed = (await http.get("/api/runs", headers=AUTH)).json()["runs"]
        assert [row["run_id"] for row in listed] == [original.run_id]

    serve(sqlite_store, changed, test)
    assert [r.run_id for r in sqlite_store.runs()] == [original.run_id]


def test_the_list_groups_children_and_forks_and_marks_a_give_up(
    sqlite_store: SQLiteCheckpointer,
) -> None:
    """The run list puts a child run right under its parent and a fork right under its
    original, one level down, each saying where it came from; the original's page lists its
    forks; a run that ended on its step limit is marked as given up, a clean one is not."""
    parent = asyncio.run(writer_with_researcher(sqlite_store).run("Write on tides."))
    original = asyncio.run(shop(sqlite_store).run("Find tea."))
    fork = asyncio.run(
        shop(sqlite_store, "Tea, again.").fork(original.run_id, at=after_results(original.trace))
    )
    limited = Agent(
        ScriptedModel([tool_call("search", {"query": "tea"}), text("Tea: a summary.")]),
        tools=[search],
        checkpointer=sqlite_store,
        policy=Policy(max_steps=1),
        runtime=Runtime(),
    )
    gave_up = asyncio.run(limited.run("Find tea, briefly."))
    assert gave_up.stop_reason is StopReason.MAX_STEPS and gave_up.state is State.DONE

    async def test(http: httpx.AsyncClient) -> None:
        rows = (await http.get("/api/runs", headers=AUTH)).json()["runs"]
        order = [row["run_id"] for row in rows]
        by_id = {row["run_id"]: row for row in rows}
        (child_id,) = [r for r in order if by_id[r]["parent"] is not None]
        assert order.index(child_id) == order.index(parent.run_id) + 1
        assert by_id[child_id]["parent"]["run_id"] == parent.run_id
        assert order.index(fork.run_id) == order.index(original.run_id) + 1
        assert by_id[fork.run_id]["forked_from"]["run_id"] == original.run_id
        assert (by_id[child_id]["depth"], by_id[fork.run_id]["depth"]) == (1, 1)
        assert by_id[parent.run_id]["depth"] == by_id[original.run_id]["depth"] == 0
        assert by_id[gave_up.run_id]["gave_up"] is True
        assert not any(by_id[r]["gave_up"] for r in (parent.run_id, child_id, fork.run_id))
        page = (await http.get(f"/api/runs/{original.run_id}", headers=AUTH)).json()
        assert [(f["run_id"], f["move"]) for f in page["forks"]] == [
            (fork.run_id, after_results(original.trace))
        ]
        assert (await http.get(f"/api/runs/{fork.run_id}", headers=AUTH)).json()["forks"] == []
        shown = (await http.get(f"/api/runs/{gave_up.run_id}", headers=AUTH)).json()
        assert shown["gave_up"] is True

    serve(sqlite_store, None, test)


def test_a_long_chain_of_forks_and_a_loop_of_origins_are_listed_once_each() -> None:
    """A chain of 3,000 forks, each of the one before, is listed in order one level deeper each
    (no recursion limit), and runs whose origins loop back to them are still each listed once."""
    from fsm_agent.inspector.views import grouped

    def row(run_id: str, forked_from: str | None) -> dict[str, Any]:
        origin = None if forked_from is None else {"run_id": forked_from, "move": 1}
        return {"run_id": run_id, "parent": None, "forked_from": origin}

    chain = [row("r0", None), *(row(f"r{i}", f"r{i - 1}") for i in range(1, 3000))]
    listed = grouped(list(reversed(chain)))
    assert [(r["run_id"], r["depth"]) for r in listed] == [(f"r{i}", i) for i in range(3000)]
    loop = [row("a", "b"), row("b", "a"), row("c", "c")]
    assert [(r["run_id"], r["depth"]) for r in grouped(loop)] == [("c", 0), ("a", 0), ("b", 1)]
