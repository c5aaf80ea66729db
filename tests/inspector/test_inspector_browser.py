"""The inspector in a real browser: the distribution's headless Chromium, driven by Playwright,
against an inspector serving a SQLite store filled by scripted runs. Opt in with
``pytest -m browser`` (``.ci/run`` does, after installing Chromium).

The test of a store of many runs photographs the pages it checks; with
``FSM_AGENT_SCREENSHOTS=DIR`` it writes them to ``DIR`` (``tests/support/inspector_screenshots.py``
runs it so for ``docs/images``), else to a scratch directory."""

from __future__ import annotations

import asyncio
import os
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fsm_agent import State
from fsm_agent.persistence import SQLiteCheckpointer
from inspector_runs import (
    HOSTILE,
    FilledStore,
    Gate,
    fill,
    fill_many,
    gated_agent,
    model_of,
    task_line,
)
from inspector_server import LiveInspector, run_in_thread

pytestmark = pytest.mark.browser

playwright_api = pytest.importorskip("playwright.sync_api")
expect = playwright_api.expect


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    """A fresh page; a JavaScript error or a dialog (an alert a hostile text raised) fails."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    opened = context.new_page()
    problems: list[str] = []
    opened.on("pageerror", lambda error: problems.append(f"page error: {error}"))
    opened.on(
        "dialog", lambda dialog: (problems.append(f"dialog: {dialog.message}"), dialog.dismiss())
    )
    yield opened
    context.close()
    assert problems == []


@pytest.fixture
def filled(sqlite_store: SQLiteCheckpointer) -> FilledStore:
    """The store holding a finished and a suspended run."""
    return run_in_thread(lambda: fill(sqlite_store))


def test_the_run_list_shows_the_runs_and_filters_them(
    sqlite_store: SQLiteCheckpointer, filled: FilledStore, page: Any
) -> None:
    """Both runs are listed with state and stop reason; the state filter and search narrow it."""
    with LiveInspector(sqlite_store) as live:
        page.goto(live.url)
        rows = page.locator("#runs tbody tr")
        expect(rows).to_have_count(2)
        done = page.locator(f'tr[data-run-id="{filled.finished}"]')
        expect(done.locator(".badge")).to_have_text("done")
        expect(done.locator("td").nth(2)).to_have_text("completed")
        expect(done.locator("td").nth(3)).to_have_text("2")
        page.select_option("#state-filter", "suspended")
        expect(rows).to_have_count(1)
        expect(rows.first).to_have_attribute("data-run-id", filled.suspended)
        page.select_option("#state-filter", "")
        page.fill("#search", filled.finished[-10:])
        expect(rows).to_have_count(1)
        expect(rows.first).to_have_attribute("data-run-id", filled.finished)
        rows.first.locator("a").click()
        expect(page.locator("#run-id")).to_have_text(filled.finished)


def test_a_finished_run_shows_its_path_and_counts_on_the_machine(
    sqlite_store: SQLiteCheckpointer, filled: FilledStore, page: Any
) -> None:
    """The diagram lights the final state; the states the run entered carry their counts."""
    with LiveInspector(sqlite_store) as live:
        page.goto(live.page(f"/runs/{filled.finished}"))
        expect(page.locator("#current-state")).to_have_text("done")
        node = page.locator("#diagram g.node", has=page.locator("title", has_text="calling"))
        expect(node).to_contain_text("×2")
        done = page.locator("#diagram g.node.current")
        expect(done).to_have_count(1)
        expect(done.locator("title")).to_have_text("done")
        expect(done).to_contain_text("ended: completed")
        moves = len(sqlite_store.load(filled.finished).state.trace)
        expect(page.locator("#moves tbody tr")).to_have_count(moves)
        expect(page.locator("#usage")).to_contain_text("2 requests, 20 in / 10 out")


def test_a_tool_output_with_markup_is_shown_as_text(
    sqlite_store: SQLiteCheckpointer, filled: FilledStore, page: Any
) -> None:
    """The hostile tool result reads as its characters; no script ran, no element was made."""
    with LiveInspector(sqlite_store) as live:
        page.goto(live.page(f"/runs/{filled.finished}"))
        expect(page.locator("#tool-calls tbody tr td").nth(3)).to_contain_text(HOSTILE)
        expect(page.locator(".part-tool_result pre")).to_contain_text(HOSTILE)
        assert page.locator("main script").count() == 0
        assert page.locator('img[src="x"]').count() == 0
        assert page.title() != "pwned"


def test_an_in_flight_run_is_followed_live(sqlite_store: SQLiteCheckpointer, page: Any) -> None:
    """While its tool runs the page lights ``dispatching``; when it ends, ``done``."""
    gate = Gate()
    agent = gated_agent(sqlite_store, gate)
    outcome: list[Any] = []
    worker = threading.Thread(target=lambda: outcome.append(asyncio.run(agent.run("Build."))))
    worker.start()
    try:
        run_id = _wait_for_state(sqlite_store, State.DISPATCHING)
        with LiveInspector(sqlite_store) as live:
            page.goto(live.page(f"/runs/{run_id}"))
            expect(page.locator("#current-state")).to_have_text("dispatching")
            current = page.locator("#diagram g.node.current title")
            expect(current).to_have_text("dispatching")
            expect(page.locator("#diagram g.node.current")).not_to_contain_text("ended")
            expect(page.locator("#live")).to_have_text("following live")
            expect(page.locator("#tool-calls tbody")).to_contain_text("(no result yet)")
            gate.open()
            expect(page.locator("#current-state")).to_have_text("done")
            expect(current).to_have_text("done")
            expect(page.locator("#diagram g.node.current")).to_contain_text("ended: completed")
            expect(page.locator("#tool-calls tbody")).to_contain_text("built all")
            expect(page.locator("#live")).to_have_text("at rest")
    finally:
        gate.open()
        worker.join(timeout=10)
    assert outcome and outcome[0].output == "Built."


def _wait_for_state(store: SQLiteCheckpointer, state: State) -> str:
    for _ in range(400):
        for run in store.runs():
            if run.state is state:
                return run.run_id
        time.sleep(0.01)
    raise AssertionError(f"no run reached {state.value}")


def test_approving_a_suspended_run_resumes_it_to_the_end(
    sqlite_store: SQLiteCheckpointer, filled: FilledStore, page: Any
) -> None:
    """Approve on the page → the agent resumes the run; the page follows it to ``done``."""
    with LiveInspector(sqlite_store, agent=filled.approver) as live:
        page.goto(live.page(f"/runs/{filled.suspended}"))
        expect(page.locator("#current-state")).to_have_text("suspended")
        question = page.locator(".question")
        expect(question).to_contain_text("delete_file")
        expect(question).to_contain_text("build/old.log")
        expect(page.locator("#read-only")).to_be_hidden()
        question.locator("button.approve").click()
        expect(page.locator("#current-state")).to_have_text("done")
        expect(page.locator("#output")).to_have_text("Deleted the old log.")
        expect(page.locator("#notice")).to_be_hidden()
        expect(page.locator("#questions-section")).to_be_hidden()
        expect(page.locator("#diagram g.node.current title")).to_have_text("done")
    assert sqlite_store.load(filled.suspended).state.output == "Deleted the old log."


def test_without_an_agent_the_questions_are_read_only(
    sqlite_store: SQLiteCheckpointer, filled: FilledStore, page: Any
) -> None:
    """The page shows the question, says why it cannot answer, and disables the buttons."""
    with LiveInspector(sqlite_store) as live:
        page.goto(live.page(f"/runs/{filled.suspended}"))
        expect(page.locator(".question")).to_contain_text("delete_file")
        expect(page.locator("#read-only")).to_be_visible()
        expect(page.locator("button.approve")).to_be_disabled()


def _shoot(page: Any, folder: Path, name: str) -> None:
    page.wait_for_timeout(300)  # let the last poll's changes paint
    page.screenshot(path=str(folder / f"inspector-{name}.png"))


def _view_box(page: Any) -> list[float]:
    box = page.locator("#diagram svg").get_attribute("viewBox")
    return [float(part) for part in box.split()]


def _wait_for_view_width(page: Any, *, below: float) -> None:
    """Wait until the diagram shows less than ``below`` of the picture's width (zoomed in)."""
    page.wait_for_function(
        "limit => parseFloat(document.querySelector('#diagram svg')"
        ".getAttribute('viewBox').split(' ')[2]) < limit",
        arg=below,
    )


def test_the_pages_explain_a_store_of_many_runs(
    page: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Over a dozen runs: the list shows each run's task, model, start time and duration and
    filters by state and text; a run's page puts its task and ending at the top, times each
    move, zooms, pans and fits its diagram and links each state to its rows; a suspended run
    waits for a human beside the model's message; the pages are photographed meanwhile."""
    folder = Path(os.environ.get("FSM_AGENT_SCREENSHOTS", tmp_path)).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    monkeypatch.chdir(tmp_path)  # the page shows the store's name: a short relative one
    store = SQLiteCheckpointer("runs.db")
    try:
        _explain_many_runs(store, page, folder)
    finally:
        store.close()


def _explain_many_runs(store: SQLiteCheckpointer, page: Any, folder: Path) -> None:
    filled = run_in_thread(lambda: fill(store))
    many = run_in_thread(lambda: fill_many(store))
    gate = Gate()
    agent = gated_agent(store, gate)
    worker = threading.Thread(target=lambda: asyncio.run(agent.run("Build the release.")))
    worker.start()
    try:
        in_flight = _wait_for_state(store, State.DISPATCHING)
        with LiveInspector(store, agent=filled.approver) as live:
            page.goto(live.url)
            rows = page.locator("#runs tbody tr")
            expect(rows).to_have_count(len(many) + 3)
            for index, run_id in enumerate(many):
                row = page.locator(f'tr[data-run-id="{run_id}"]')
                expect(row.locator("a.task-link")).to_have_text(task_line(index))
                expect(row.locator("td.model")).to_have_text(model_of(index))
                expect(row.locator("td.started")).to_have_text(re.compile(r"^\d\d:\d\d:\d\d$"))
                expect(row.locator("td.duration")).to_have_text(re.compile(r"^[\d.]+ m?s$"))
            _shoot(page, folder, "runs")
            page.fill("#search", "tickets")
            expect(rows).to_have_count(3)
            page.fill("#search", "")
            page.select_option("#state-filter", "aborted")
            expect(rows).to_have_count(1)
            expect(rows.first.locator("td.answer")).to_contain_text("refused the API key")
            page.select_option("#state-filter", "")

            page.goto(live.page(f"/runs/{many[0]}"))
            expect(page.locator("#task")).to_have_text(task_line(0))
            expect(page.locator("#ending")).to_contain_text("Finished")
            expect(page.locator("#output")).to_contain_text("Three open tickets")
            expect(page.locator("#live")).to_have_text("at rest")
            diagram = page.locator("#diagram")
            assert page.locator("#ending").bounding_box()["y"] < diagram.bounding_box()["y"]
            moves = page.locator("#moves tbody tr")
            expect(moves).to_have_count(len(store.load(many[0]).state.trace))
            expect(moves.first.locator("td.time")).to_have_text(
                re.compile(r"^\d\d:\d\d:\d\d\.\d{3}$")
            )
            expect(moves.nth(1).locator("td.took")).to_have_text(re.compile(r"^[\d.]+ m?s$"))
            expect(diagram.locator("svg")).to_have_count(1)
            _shoot(page, folder, "run")
            page.locator("#moves").evaluate("table => table.closest('section').scrollIntoView()")
            _shoot(page, folder, "timeline")
            page.evaluate("window.scrollTo(0, 0)")
            fitted = _view_box(page)
            page.click("#zoom-in")
            zoomed = _view_box(page)
            assert zoomed[2] < fitted[2] and zoomed[3] < fitted[3]
            box = diagram.bounding_box()
            page.mouse.move(box["x"] + 300, box["y"] + 200)
            page.mouse.down()
            page.mouse.move(box["x"] + 200, box["y"] + 150, steps=5)
            page.mouse.up()
            panned = _view_box(page)
            assert panned[0] > zoomed[0] and panned[2] == zoomed[2]
            page.mouse.wheel(0, -300)
            _wait_for_view_width(page, below=panned[2])
            page.click("#fit")
            assert _view_box(page) == fitted
            page.locator("#state-links a", has_text="dispatching").click()
            expect(page).to_have_url(re.compile(r"/states/dispatching$"))
            expect(page.locator("#diagram svg")).to_have_count(1)
            expect(page.locator("#diagram #state-dispatching")).to_have_count(1)
            expect(page.locator("#diagram #to-finalizing")).to_have_count(1)
            _shoot(page, folder, "state")
            page.locator("#diagram #to-finalizing").click()
            expect(page).to_have_url(re.compile(r"/states/finalizing$"))
            page.go_back()
            page.go_back()
            expect(page.locator("#task")).to_have_text(task_line(0))
            page.locator("#diagram #state-calling").click()
            expect(page).to_have_url(re.compile(r"/states/calling$"))

            page.goto(live.page(f"/runs/{many[5]}"))
            expect(page.locator("#live")).to_have_text("waiting for a human")
            expect(page.locator("#ending")).to_contain_text("Waiting for a human")
            question = page.locator(".question")
            expect(question.locator(".model-said")).to_contain_text("lost in transit")
            expect(question.locator("button.approve")).to_be_visible()
            expect(page.locator("#diagram svg")).to_have_count(1)
            expect(page.locator("#diagram")).not_to_contain_text(re.compile(r"\bended: \w"))
            _shoot(page, folder, "approval")

            page.goto(live.page(f"/runs/{in_flight}"))
            expect(page.locator("#live")).to_have_text("following live")
            expect(page.locator("#diagram g.node.current title")).to_have_text("dispatching")
            expect(page.locator("#ending")).to_contain_text("Running: now in dispatching")
            _shoot(page, folder, "live")
    finally:
        gate.open()
        worker.join(timeout=10)


def test_a_shared_run_link_opens_once_the_token_is_given(
    sqlite_store: SQLiteCheckpointer, filled: FilledStore, browser: Any
) -> None:
    """A run's address without the token asks for it and then shows that run; another link
    in the same browser opens straight away; a wrong token is asked for again."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    with LiveInspector(sqlite_store) as live:
        page.goto(f"{live.base}/runs/{filled.finished}")
        form = page.locator("#token-form")
        expect(form).to_be_visible()
        page.fill("#token-input", "not-the-token")
        page.click("#token-form button")
        expect(form).to_be_visible()
        expect(page.locator("#notice")).to_contain_text("refused")
        page.fill("#token-input", live.inspector.token)
        page.click("#token-form button")
        expect(page.locator("#task")).to_have_text("Read the page.")
        expect(form).to_be_hidden()
        other = context.new_page()
        other.goto(f"{live.base}/runs/{filled.suspended}")
        expect(other.locator("#task")).to_have_text("Clean up the build directory.")
        expect(other.locator("#token-form")).to_be_hidden()
    context.close()


def test_public_reading_shows_runs_without_the_token_and_asks_for_it_to_answer(
    sqlite_store: SQLiteCheckpointer, filled: FilledStore, browser: Any
) -> None:
    """With public reading the list and a run open with no token; approving asks for the token
    and then resumes the run."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    with LiveInspector(sqlite_store, agent=filled.approver, public_read=True) as live:
        page.goto(f"{live.base}/")
        expect(page.locator("#runs tbody tr")).to_have_count(2)
        expect(page.locator("#token-form")).to_be_hidden()
        page.goto(f"{live.base}/runs/{filled.suspended}")
        expect(page.locator("#task")).to_have_text("Clean up the build directory.")
        page.locator("button.approve").click()
        expect(page.locator("#token-form")).to_be_visible()
        page.fill("#token-input", live.inspector.token)
        page.click("#token-form button")
        expect(page.locator("#current-state")).to_have_text("done")
        expect(page.locator("#output")).to_have_text("Deleted the old log.")
    context.close()


def test_a_child_run_is_one_click_away_and_a_fork_from_here_opens_the_new_run(
    sqlite_store: SQLiteCheckpointer, page: Any
) -> None:
    """The parent's agent-tool call links to the child's page, which links back; "Fork from
    here" on a move links to the fork, which the inspector's agent runs to its end."""
    from test_inspector_compose import after_results, shop, writer_with_researcher

    parent = run_in_thread(lambda: writer_with_researcher(sqlite_store).run("Write on tides."))
    original = run_in_thread(lambda: shop(sqlite_store).run("Find tea."))
    with LiveInspector(sqlite_store, agent=shop(sqlite_store, "Tea, again.")) as live:
        page.goto(live.page(f"/runs/{parent.run_id}"))
        page.locator("#tool-calls a.run-link").click()
        expect(page.locator("#task")).to_have_text("Why are there tides?")
        page.locator("#lineage a.run-link").click()
        expect(page.locator("#run-id")).to_have_text(parent.run_id)
        page.goto(live.page(f"/runs/{original.run_id}"))
        at = after_results(original.trace)
        page.locator(f'#moves tr[data-move="{at}"] button.fork').click()
        page.locator(".forked a.run-link").click()
        expect(page.locator("#lineage")).to_contain_text(f"after move {at}")
        expect(page.locator("#current-state")).to_have_text("done")
        expect(page.locator("#output")).to_have_text("Tea, again.")


def test_the_list_shows_children_and_forks_under_their_runs_and_a_give_up_apart(
    sqlite_store: SQLiteCheckpointer, page: Any
) -> None:
    """In the list a child run sits indented right under its parent, naming the call; a run
    that ended on its step limit wears a "gave up" badge, not the clean "done"; an original's
    page lists its fork, whose link opens it."""
    from test_inspector_compose import after_results, search, shop, writer_with_researcher

    from fsm_agent import Agent, Policy, Runtime
    from fsm_agent.testing import ScriptedModel, text, tool_call

    parent = run_in_thread(lambda: writer_with_researcher(sqlite_store).run("Write on tides."))
    original = run_in_thread(lambda: shop(sqlite_store).run("Find tea."))
    at = after_results(original.trace)
    fork = run_in_thread(lambda: shop(sqlite_store, "Tea, again.").fork(original.run_id, at=at))
    limited = Agent(
        ScriptedModel([tool_call("search", {"query": "tea"}), text("Tea: a summary.")]),
        tools=[search],
        checkpointer=sqlite_store,
        policy=Policy(max_steps=1),
        runtime=Runtime(),
    )
    gave_up = run_in_thread(lambda: limited.run("Find tea, briefly."))
    with LiveInspector(sqlite_store) as live:
        page.goto(live.page("/"))
        rows = page.locator("#runs tbody tr")
        expect(rows).to_have_count(5)
        ids = [rows.nth(i).get_attribute("data-run-id") for i in range(5)]
        child = ids[ids.index(parent.run_id) + 1]
        below = page.locator(f'#runs tr[data-run-id="{child}"]')
        expect(below).to_have_attribute("data-depth", "1")
        expect(below.locator(".origin")).to_have_text(f"↳ child of {parent.run_id} (call c1)")
        assert ids[ids.index(original.run_id) + 1] == fork.run_id
        badge = page.locator(f'#runs tr[data-run-id="{gave_up.run_id}"] .badge')
        expect(badge).to_have_text("gave up")
        clean = page.locator(f'#runs tr[data-run-id="{parent.run_id}"] .badge')
        expect(clean).to_have_text("done")
        assert badge.evaluate("b => getComputedStyle(b).backgroundColor") != clean.evaluate(
            "b => getComputedStyle(b).backgroundColor"
        )
        page.goto(live.page(f"/runs/{original.run_id}"))
        page.locator(f'#forks li[data-run-id="{fork.run_id}"] a.run-link').click()
        expect(page.locator("#lineage")).to_contain_text(f"after move {at}")


def test_long_unbroken_texts_keep_the_run_list_inside_the_window(
    sqlite_store: SQLiteCheckpointer, page: Any
) -> None:
    """A run whose task, model name and answer are each 300 characters without a space: the run
    list stays within the 1,400 px window, and each cut cell shows its whole text on hover."""
    from fsm_agent import Agent
    from fsm_agent.testing import ScriptedModel, text

    task, model, answer = "T" * 300, "m" * 300, "A" * 300

    async def one_run() -> str:
        agent = Agent(ScriptedModel([text(answer)], name=model), checkpointer=sqlite_store)
        return (await agent.run(task)).run_id

    run_id = run_in_thread(one_run)
    with LiveInspector(sqlite_store) as live:
        page.goto(live.url)
        row = page.locator(f'tr[data-run-id="{run_id}"]')
        expect(row).to_have_count(1)
        assert page.evaluate("document.documentElement.scrollWidth") <= 1400
        assert row.bounding_box()["width"] <= 1400
        for name, shown in (("task-cell", task), ("model", model), ("answer", answer)):
            cell = row.locator(f"td.{name}")
            hover = cell.get_attribute("title") or cell.locator("[title]").first.get_attribute(
                "title"
            )
            assert hover is not None and hover.startswith(shown[:100]), name
            assert cell.bounding_box()["height"] <= 120, name
