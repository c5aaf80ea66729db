"""The docs pages stand alone: they cite no document outside the repository, state each
measured figure once (on docs/performance.md), and are all in the docs site's navigation; the
built site shows the machine's picture and highlighted code on its home page, and the errors
reference page without raw markup."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from docs_blocks import PAGES, ROOT, build_site

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


# What a built page must never show: a Sphinx role left raw, or a citation of a document users
# do not have (the design document, or a seed by number: "S000 §1.1", "[S002]").
RAW_ROLE = re.compile(r":(?:class|func|mod|meth|data|attr|exc|obj):")
CITATION = re.compile(r"DESIGN\.md|\bDESIGN §|\bS00\d\b")


def _texts(site: Path) -> dict[str, str]:
    return {str(p.relative_to(site)): p.read_text(encoding="utf-8") for p in site.rglob("*.html")}


def test_site_builds_strictly_without_a_warning(docs_site: Path) -> None:
    """``mkdocs build --strict`` without ``--quiet`` passes with no WARNING line, and builds
    every page of docs/ (the guide and the API reference)."""
    sources = [p.relative_to(ROOT / "docs").with_suffix("") for p in (ROOT / "docs").rglob("*.md")]
    built = [docs_site / ("" if s.name == "index" else s) / "index.html" for s in sources]
    assert len(built) > 30
    assert [page for page in built if not page.is_file()] == []


def _minimal_site(root: Path, page: str) -> None:
    """A two-page copy of the docs check under ``root``: mkdocs.yml's settings (strict, link
    validation, theme, extensions) with a two-page nav and no API reference, so it builds in
    seconds; ``page`` is the second page's text."""
    import yaml  # mkdocs's own dependency: there whenever the docs extra is

    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    config.pop("hooks", None)  # they serve the diagrams, which the two pages do not show
    config["plugins"] = ["search"]
    config["nav"] = [{"Home": "index.md"}, {"Page": "page.md"}]
    (root / "docs").mkdir(parents=True)
    (root / "mkdocs.yml").write_text(yaml.safe_dump(config), encoding="utf-8")
    (root / "docs" / "index.md").write_text("# Home\n\nSee [the page](page.md).\n")
    (root / "docs" / "page.md").write_text(f"# Page\n\n{page}\n")


def test_a_broken_link_fails_the_docs_check(tmp_path: Path) -> None:
    """A link to a page that does not exist, planted in a two-page copy of the site's settings,
    fails the check and the failure names the link; the same copy without it passes."""
    pytest.importorskip("mkdocs", reason="the docs extra is not installed")
    _minimal_site(tmp_path / "good", "Back [home](index.md).")
    assert build_site(tmp_path / "good", tmp_path / "good-site") == []
    _minimal_site(tmp_path / "bad", "See [the missing page](no-such-page.md).")
    problems = build_site(tmp_path / "bad", tmp_path / "bad-site")
    assert any("no-such-page.md" in line for line in problems)


def test_no_page_shows_a_raw_sphinx_role(docs_site: Path) -> None:
    """The docstrings' roles (``:class:`X```) are rendered, never shown as text."""
    raw = {name: RAW_ROLE.findall(text) for name, text in _texts(docs_site).items()}
    assert {name: found for name, found in raw.items() if found} == {}


def test_roles_become_links_to_the_reference(docs_site: Path) -> None:
    """A role naming a documented object links to its entry (the compaction module's
    ``:class:`TrimToolOutputs```), on another reference page too."""
    persistence = (docs_site / "reference/persistence/index.html").read_text(encoding="utf-8")
    assert re.search(r'<a [^>]*href="#fsm_agent\.compaction\.TrimToolOutputs"', persistence)
    pages = _texts(docs_site)
    cross_page = re.compile(r'<a [^>]*href="\.\./[a-z_]+/#fsm_agent\.[\w.]+"')
    assert sum(len(cross_page.findall(text)) for text in pages.values()) > 20


def test_no_page_cites_an_internal_document(docs_site: Path) -> None:
    """No page of the site, the API reference included, cites DESIGN.md or a seed document."""
    found = {name: CITATION.findall(text) for name, text in _texts(docs_site).items()}
    assert {name: cited for name, cited in found.items() if cited} == {}


def test_no_page_shows_a_private_base(docs_site: Path) -> None:
    """A class's bases never show a private class (``Bases: _PolicyModel``)."""
    bases = re.compile(r"Bases: (.*?)</p>", re.DOTALL)
    shown = [b for text in _texts(docs_site).values() for b in bases.findall(text)]
    assert len(shown) > 20
    private = re.compile(r">_\w+<|title=\"[\w.]*\._")
    assert [b for b in shown if private.search(b)] == []


def test_code_is_highlighted_with_no_network(docs_site: Path) -> None:
    """Code blocks are highlighted when the site is built (Pygments' token classes are in the
    page), and no page loads a script, style or font from another host."""
    quickstart = (docs_site / "quickstart/index.html").read_text(encoding="utf-8")
    assert re.search(r'<span class="kn">(from|import)</span>', quickstart)
    remote = re.compile(r'<(?:script|link)\b[^>]*(?:src|href)="(?:https?:)?//', re.IGNORECASE)
    loaded = {name: remote.findall(text) for name, text in _texts(docs_site).items()}
    assert {name: found for name, found in loaded.items() if found} == {}


def test_the_home_page_shows_the_machine_and_code(docs_site: Path) -> None:
    """The built home page shows the overview picture and a highlighted Python sample."""
    home = (docs_site / "index.html").read_text(encoding="utf-8")
    picture = re.search(r'<img [^>]*src="diagrams/agent\.svg"', home)
    assert picture is not None and (docs_site / "diagrams" / "agent.svg").is_file()
    assert re.search(r'<span class="kn">(from|import)</span>', home)


def test_the_errors_page_shows_no_raw_markup(docs_site: Path) -> None:
    """The exception tree on the errors reference page shows names, not ````literal```` markup."""
    page = (docs_site / "reference" / "errors" / "index.html").read_text(encoding="utf-8")
    assert "FsmAgentError" in page and "RateLimitError" in page
    assert "``" not in page


def test_roles_resolve_in_the_scope_of_their_docstring(tmp_path: Path) -> None:
    """The site's Griffe extension turns each role form into an optional reference to the
    object's canonical path (as imported, shortened with ``~``, searched with ``.``, titled),
    leaves ``!`` forms and names outside the package as code, and drops private bases."""
    griffe = pytest.importorskip("griffe", reason="the docs extra is not installed")
    package = tmp_path / "demo"
    package.mkdir()
    (package / "sub.py").write_text(
        '"""A module."""\n\n\nclass Thing:\n    """A thing."""\n\n'
        '    def go(self) -> None:\n        """Go."""\n\n\n'
        'def helper() -> None:\n    """Help."""\n'
    )
    (package / "__init__.py").write_text(
        '"""See :class:`Thing`, :meth:`~demo.Thing.go`, :func:`.helper`,\n'
        ':mod:`the module <demo.sub>`, :meth:`.go`, :class:`!Thing` and :class:`dict`."""\n\n'
        "from demo.sub import Thing, helper\n\n\n"
        'class _Base:\n    """Private."""\n\n\n'
        'class Public(_Base, Thing):\n    """Public."""\n'
    )
    extension = griffe.load_extensions(f"{ROOT / 'mkdocs_crossrefs.py'}:SphinxRoles")
    demo = griffe.load("demo", search_paths=[tmp_path], extensions=extension)
    ref = '<autoref identifier="{}" optional>`{}`</autoref>'
    assert demo.docstring.value == (
        f"See {ref.format('demo.sub.Thing', 'Thing')}, {ref.format('demo.sub.Thing.go', 'go')}, "
        f"{ref.format('demo.sub.helper', 'helper')},\n{ref.format('demo.sub', 'the module')}, "
        f"{ref.format('demo.sub.Thing.go', 'go')}, `Thing` and `dict`."
    )
    assert [str(base) for base in demo["Public"].bases] == ["Thing"]
