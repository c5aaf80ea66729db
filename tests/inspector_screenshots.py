"""Writes the screenshots of docs/inspector.md: the inspector over a store of scripted runs, in
the distribution's headless Chromium. Run from a checkout with the dev extra installed:

    python tests/inspector_screenshots.py

It overwrites ``docs/images/inspector-*.png``.
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from playwright.sync_api import expect, sync_playwright

from fsm_agent import State
from fsm_agent.persistence import SQLiteCheckpointer
from inspector_runs import Gate, fill, gated_agent
from inspector_server import CHROMIUM, CHROMIUM_ARGS, LiveInspector, run_in_thread

OUT = Path(__file__).resolve().parent.parent / "docs" / "images"


def _shoot(page: Any, name: str, *, full_page: bool = False) -> None:
    page.wait_for_timeout(300)  # let the last poll's changes paint
    page.screenshot(path=str(OUT / f"inspector-{name}.png"), full_page=full_page)
    print(f"wrote {OUT / f'inspector-{name}.png'}")


def main() -> None:
    """Fill a store, serve it, and photograph the pages."""
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        os.chdir(scratch)  # the page shows the store's name: a short relative one
        store = SQLiteCheckpointer("runs.db")
        filled = run_in_thread(lambda: fill(store))
        gate = Gate()
        agent = gated_agent(store, gate)
        worker = threading.Thread(target=lambda: run_in_thread(lambda: agent.run("Build.")))
        worker.start()
        while not any(run.state is State.DISPATCHING for run in store.runs()):
            time.sleep(0.01)
        in_flight = next(r.run_id for r in store.runs() if r.state is State.DISPATCHING)
        try:
            with (
                LiveInspector(store, agent=filled.approver) as live,
                sync_playwright() as driver,
            ):
                browser = driver.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
                page = browser.new_page(viewport={"width": 1280, "height": 820})
                page.goto(live.url)
                expect(page.locator("#runs tbody tr")).to_have_count(3)
                _shoot(page, "runs")
                page.goto(live.page(f"/runs/{filled.finished}"))
                expect(page.locator("#diagram svg")).to_have_count(1)
                _shoot(page, "run", full_page=True)
                page.goto(live.page(f"/runs/{filled.suspended}"))
                expect(page.locator("button.approve")).to_be_enabled()
                _shoot(page, "approval")
                page.goto(live.page(f"/runs/{in_flight}"))
                expect(page.locator("#diagram g.node.current title")).to_have_text("dispatching")
                page.locator("#diagram").scroll_into_view_if_needed()
                _shoot(page, "live")
                browser.close()
        finally:
            gate.open()
            worker.join()
            store.close()


if __name__ == "__main__":
    main()
