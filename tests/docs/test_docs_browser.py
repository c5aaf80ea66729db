"""The docs site in a real browser: the site built by mkdocs, served on loopback, each page that
shows a generated diagram opened in the distribution's headless Chromium at 1,400 px. Every
diagram must be shown at a size where its smallest text reads at 9 px or more (the measure
tests/diagrams/test_diagrams_legible.py applies at the README's 900 px), and the page must not
scroll sideways. Opt in with ``pytest -m browser``."""

from __future__ import annotations

import functools
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.browser

playwright_api = pytest.importorskip("playwright.sync_api")

ROOT = Path(__file__).resolve().parents[2]
MIN_PX = 9.0
"""The smallest text size, in CSS pixels, that a shown diagram may have."""

PAGES = ("diagrams/", "machine/", "composition/", "cli/")
"""The pages that show generated diagrams."""


class _Quiet(SimpleHTTPRequestHandler):
    """A static file handler that does not log each request."""

    def log_message(self, format: str, *args: Any) -> None:
        """Log nothing."""


@pytest.fixture(scope="module")
def served_docs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The docs site, built into a scratch directory and served on a free loopback port."""
    out = tmp_path_factory.mktemp("site")
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        check=False,
    )
    assert built.returncode == 0, built.stderr
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(out)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join()


def _measure(svg: Path) -> tuple[float, float]:
    """The width of ``svg``'s view box and its smallest font size, both in its own units."""
    text = svg.read_text(encoding="utf-8")
    box = re.search(r'viewBox="[\d.\-]+ [\d.\-]+ ([\d.]+) [\d.]+"', text)
    assert box is not None, svg
    sizes = [float(size) for size in re.findall(r'font-size="([\d.]+)"', text)]
    return float(box.group(1)), min(sizes)


@pytest.mark.parametrize("path", PAGES)
def test_each_diagram_is_shown_at_a_legible_size(served_docs: str, browser: Any, path: str) -> None:
    """In a 1,400 px window each diagram of the page is shown large enough that its smallest
    text is at least 9 px, and the page itself does not scroll sideways."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    try:
        page.goto(f"{served_docs}/{path}", wait_until="load")
        images = page.locator('article img[src$=".svg"]')
        assert images.count() > 0
        too_small = []
        for n in range(images.count()):
            image = images.nth(n)
            name = (image.get_attribute("src") or "").rsplit("/", 1)[-1]
            width, smallest = _measure(ROOT / "diagrams" / name)
            box = image.bounding_box()
            assert box is not None, name
            shown = smallest * box["width"] / width
            if shown < MIN_PX:
                too_small.append(f"{name}: {shown:.1f} px at {box['width']:.0f} px wide")
        assert too_small == []
        assert page.evaluate("document.documentElement.scrollWidth") <= 1400
    finally:
        page.close()
