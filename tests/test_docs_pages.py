"""The docs pages stand alone: they cite no document outside the repository, state each
measured figure once (on docs/performance.md), and are all in the docs site's navigation."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from docs_blocks import PAGES, ROOT

# A measured ratio, rate or per-step time, in prose (code blocks hold sample output).
FIGURE = re.compile(r"\d[\d,.]*\s?×|\d[\d,.]*/s\b|\d[\d,.]*\s?µs\b|examples per second")
FENCED = re.compile(r"^( *)```.*?^\1```", re.MULTILINE | re.DOTALL)


def _prose(text: str) -> str:
    return FENCED.sub("", text)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_page_cites_no_design_document(page: Path) -> None:
    """No page refers readers to DESIGN.md, which users do not have."""
    assert "DESIGN" not in page.read_text()


@pytest.mark.parametrize("command", [(), ("fuzz",)], ids=["main", "fuzz"])
def test_help_cites_no_design_document(command: tuple[str, ...]) -> None:
    """``fsm-agent --help`` and ``fsm-agent fuzz --help`` cite no design document."""
    done = subprocess.run(
        [sys.executable, "-m", "fsm_agent", *command, "--help"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "usage:" in done.stdout
    assert "DESIGN" not in done.stdout


@pytest.mark.parametrize(
    "page", [p for p in PAGES if p.name != "performance.md"], ids=lambda p: p.name
)
def test_figures_live_on_the_performance_page(page: Path) -> None:
    """Measured ratios and rates are stated on docs/performance.md alone, so pages cannot
    disagree; the others link to it."""
    found = FIGURE.findall(_prose(page.read_text()))
    assert found == []


def test_every_page_is_in_the_site_navigation() -> None:
    """mkdocs.yml lists every page of docs/ (a page left out would be unreachable)."""
    nav = (ROOT / "mkdocs.yml").read_text()
    pages = sorted((ROOT / "docs").rglob("*.md"))
    missing = [str(p.relative_to(ROOT / "docs")) for p in pages]
    missing = [name for name in missing if f": {name}" not in nav]
    assert missing == []


def test_site_builds_strictly_and_cites_no_design_document(tmp_path: Path) -> None:
    """``mkdocs build --strict`` passes, and the generated API reference cites no DESIGN.md."""
    pytest.importorskip("mkdocs", reason="the docs extra is not installed")
    site = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    pages = list(site.rglob("*.html"))
    assert len(pages) > 20
    assert [p for p in pages if "DESIGN" in p.read_text(encoding="utf-8")] == []
