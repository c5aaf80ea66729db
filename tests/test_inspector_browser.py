"""The inspector in a real browser: the distribution's headless Chromium, driven by Playwright,
against an inspector serving a SQLite store filled by scripted runs. Opt in with
``pytest -m browser`` (``.ci/run`` does, after installing Chromium)."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fsm_agent import State
from fsm_agent.persistence import SQLiteCheckpointer
from inspector_runs import HOSTILE, FilledStore, Gate, fill, gated_agent
from inspector_server import CHROMIUM, CHROMIUM_ARGS, LiveInspector, run_in_thread

pytestmark = pytest.mark.browser

playwright_api = pytest.importorskip("playwright.sync_api")
expect = playwright_api.expect


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One headless Chromium for the module."""
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"no Chromium at {CHROMIUM}: apt-get install -y chromium")
    with playwright_api.sync_playwright() as driver:
        launched = driver.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield launched
        launched.close()


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
def store(tmp_path: Path) -> Iterator[SQLiteCheckpointer]:
    """A SQLite store for one test."""
    opened = SQLiteCheckpointer(tmp_path / "runs.db")
    yield opened
    opened.close()


@pytest.fixture
def filled(store: SQLiteCheckpointer) -> FilledStore:
    """The store holding a finished and a suspended run."""
    return run_in_thread(lambda: fill(store))


def test_the_run_list_shows_the_runs_and_filters_them(
    store: SQLiteCheckpointer, filled: FilledStore, page: Any
) -> None:
    """Both runs are listed with state and stop reason; the state filter and search narrow it."""
    with LiveInspector(store) as live:
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
    store: SQLiteCheckpointer, filled: FilledStore, page: Any
) -> None:
    """The diagram lights the final state; the states the run entered carry their counts."""
    with LiveInspector(store) as live:
        page.goto(live.page(f"/runs/{filled.finished}"))
        expect(page.locator("#current-state")).to_have_text("done")
        node = page.locator("#diagram g.node", has=page.locator("title", has_text="calling"))
        expect(node).to_contain_text("×2")
        done = page.locator("#diagram g.node.current")
        expect(done).to_have_count(1)
        expect(done.locator("title")).to_have_text("done")
        expect(done).to_contain_text("final: completed")
        moves = len(store.load(filled.finished).state.trace)
        expect(page.locator("#moves tbody tr")).to_have_count(moves)
        expect(page.locator("#usage")).to_contain_text("2 requests, 20 in / 10 out")


def test_a_tool_output_with_markup_is_shown_as_text(
    store: SQLiteCheckpointer, filled: FilledStore, page: Any
) -> None:
    """The hostile tool result reads as its characters; no script ran, no element was made."""
    with LiveInspector(store) as live:
        page.goto(live.page(f"/runs/{filled.finished}"))
        expect(page.locator("#tool-calls tbody tr td").nth(3)).to_contain_text(HOSTILE)
        expect(page.locator(".part-tool_result pre")).to_contain_text(HOSTILE)
        assert page.locator("main script").count() == 0
        assert page.locator('img[src="x"]').count() == 0
        assert page.title() != "pwned"


def test_an_in_flight_run_is_followed_live(store: SQLiteCheckpointer, page: Any) -> None:
    """While its tool runs the page lights ``dispatching``; when it ends, ``done``."""
    gate = Gate()
    agent = gated_agent(store, gate)
    outcome: list[Any] = []
    worker = threading.Thread(target=lambda: outcome.append(asyncio.run(agent.run("Build."))))
    worker.start()
    try:
        run_id = _wait_for_state(store, State.DISPATCHING)
        with LiveInspector(store) as live:
            page.goto(live.page(f"/runs/{run_id}"))
            expect(page.locator("#current-state")).to_have_text("dispatching")
            current = page.locator("#diagram g.node.current title")
            expect(current).to_have_text("dispatching")
            expect(page.locator("#diagram g.node.current")).not_to_contain_text("final")
            expect(page.locator("#live")).to_have_text("following live")
            expect(page.locator("#tool-calls tbody")).to_contain_text("(no result yet)")
            gate.open()
            expect(page.locator("#current-state")).to_have_text("done")
            expect(current).to_have_text("done")
            expect(page.locator("#diagram g.node.current")).to_contain_text("final: completed")
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
    store: SQLiteCheckpointer, filled: FilledStore, page: Any
) -> None:
    """Approve on the page → the agent resumes the run; the page follows it to ``done``."""
    with LiveInspector(store, agent=filled.approver) as live:
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
    assert store.load(filled.suspended).state.output == "Deleted the old log."


def test_without_an_agent_the_questions_are_read_only(
    store: SQLiteCheckpointer, filled: FilledStore, page: Any
) -> None:
    """The page shows the question, says why it cannot answer, and disables the buttons."""
    with LiveInspector(store) as live:
        page.goto(live.page(f"/runs/{filled.suspended}"))
        expect(page.locator(".question")).to_contain_text("delete_file")
        expect(page.locator("#read-only")).to_be_visible()
        expect(page.locator("button.approve")).to_be_disabled()
