"""Performance sentences match the latest benchmark round.

docs/performance.md's results block, written by ``benchmarks/run.py``, holds the round's table of
targets and the sentences generated from it; ``benchmarks/claims.py`` reads them back. Here:
the block agrees with itself, the rest of the page states no figure of the round outside it
(earlier rounds stay, dated, in their own section), and each comparison the README makes in
words holds in the round's table.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable

import pytest

from docs_blocks import PAGES, ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))

import claims

PERFORMANCE = ROOT / "docs" / "performance.md"
README = ROOT / "README.md"

# A measured figure in prose: a ratio, a time, a rate, a size or a share.
FIGURE = re.compile(r"\d[\d,.]*\s?(?:×|µs\b|ms\b|KiB\b|MiB\b|/s\b|%)")
FENCED = re.compile(r"^( *)```.*?^\1```", re.MULTILINE | re.DOTALL)
HISTORY, OTHER = "## Earlier rounds", "## Other figures"
DATED = re.compile(r"^### \d{4}-\d{2}-\d{2}\b")
# The scripts whose figures are rows of the round: an "Other figures" item may not restate them.
ROUND_SCRIPTS = ("run.py", "workload.py", "http_path.py", "durable_lag.py", "startup.py")

# A measured figure stated in a sentence on another page ("which takes about 30 ms").
MEASURED = re.compile(
    r"\b(?:takes?|took|costs?|spends?|weighs?)\s+(?:about\s+|around\s+|roughly\s+|only\s+)?"
    r"\d[\d,.]*\s?(?:ns|µs|ms|KiB|MiB|%|×)(?!\w)"
)
# A comparison in words, on any page: each must be one of README_CLAIMS.
COMPARATIVE = re.compile(
    r"times (?:less|more|faster|slower) than|(?:faster|slower|cheaper|dearer) than|"
    r"\bweighs?\b|small multiple of|less than twice",
    re.IGNORECASE,
)


def _steps(rows: dict[str, claims.Row]) -> list[float | None]:
    return [_value(rows, f"µs per step, N = {n}") for n in (2, 10, 50)]


def _memory(rows: dict[str, claims.Row]) -> list[float | None]:
    return [
        _value(rows, f"memory per concurrent run, {n} runs of N = 10") for n in ("1,000", "10,000")
    ]


def _peers(rows: dict[str, claims.Row]) -> list[float | None]:
    names = ("pydantic-ai", "LangGraph", "openai-agents")
    return [_value(rows, f"{peer} per step ÷ fsm_agent's (least over N)") for peer in names]


def _value(rows: dict[str, claims.Row], label: str) -> float | None:
    row = rows.get(label)
    return None if row is None else row.value(claims.BY_LABEL[label])


# What each comparison the README makes in words means in figures of the round's table.
README_CLAIMS: dict[
    str, tuple[Callable[[dict[str, claims.Row]], list[float | None]], float, float]
] = {
    # a step against the typed floor, at N = 2, 10 and 50
    "costs a small multiple of": (_steps, 1.0, 5.0),
    # each named peer's step over fsm_agent's, the least over N
    "tens of times less than": (_peers, 10.0, float("inf")),
    # a concurrent run's memory against the typed floor's, 1,000 and 10,000 runs
    "weighs less than": (_memory, 0.0, 1.0),
}


def _round() -> dict[str, claims.Row]:
    return claims.parse(claims.block(PERFORMANCE.read_text(encoding="utf-8")))


def _sections(text: str) -> list[tuple[str, str]]:
    """``(heading, body)`` for each ``##`` section, the text before the first as ``""``."""
    parts = re.split(r"^(## .*)$", text, flags=re.MULTILINE)
    return [("", parts[0]), *zip(parts[1::2], parts[2::2], strict=True)]


def stray_figures(text: str) -> list[str]:
    """Figures docs/performance.md states outside its results block where the round's own
    figures would be expected: anywhere but the dated sections of "Earlier rounds", and the
    items of "Other figures" that name a script the round does not run."""
    start, end = text.index(claims.START), text.index(claims.END)
    outside = FENCED.sub("", text[:start] + text[end + len(claims.END) :])
    found = []
    for heading, body in _sections(outside):
        if heading == HISTORY:
            subsections = re.split(r"^(### .*)$", body, flags=re.MULTILINE)
            found += [f"undated: {f}" for f in FIGURE.findall(subsections[0])]
            for title, sub in zip(subsections[1::2], subsections[2::2], strict=True):
                if not DATED.match(title):
                    found += [f"{title}: {f}" for f in FIGURE.findall(sub)]
        elif heading == OTHER:
            for item in re.split(r"^- ", body, flags=re.MULTILINE)[1:]:
                scripts = re.findall(r"benchmarks/(\w+\.py)", item)
                if FIGURE.search(item) and (not scripts or set(scripts) & set(ROUND_SCRIPTS)):
                    found.append(f"{OTHER}: {item[:60]!r}")
        else:
            found += [f"{heading or 'intro'}: {f}" for f in FIGURE.findall(body)]
    return found


def unchecked_comparisons(pages: list[tuple[str, str]]) -> list[str]:
    """Comparisons in words (on pages other than docs/performance.md) that are not a checked
    README claim."""
    found = []
    for name, text in pages:
        prose = " ".join(FENCED.sub("", text).split())
        for match in COMPARATIVE.finditer(prose):
            around = prose[max(0, match.start() - 40) : match.end() + 40]
            if not any(claim in around for claim in README_CLAIMS):
                found.append(f"{name}: …{around}…")
    return found


def _page(rows: list[list[str]]) -> str:
    """A performance page whose results block holds ``rows`` and the sentences they give."""
    table = [
        "| " + " | ".join(claims.COLUMNS) + " |",
        "|" + "---|" * len(claims.COLUMNS),
        *("| " + " | ".join(row) + " |" for row in rows),
    ]
    heading = claims.TABLE_HEADING + "\n\n" + "\n".join(table)
    said = claims.sentences(claims.parse(heading))
    return (
        f"# Performance\n\n{claims.START}\n{heading}\n\n{claims.SENTENCES_HEADING}\n\n{said}\n\n"
        f"{claims.END}\n\n{HISTORY}\n\n### 2026-11-24: an earlier round\n\n3.27× then.\n"
    )


def _sample_rows() -> list[list[str]]:
    step = claims.BY_LABEL["µs per step, N = 10"]
    lag = claims.BY_LABEL[claims.IMPORT]
    return [
        claims.row_cells(step, "44.4", "13.6 (typed floor)", "3.27× (1.88–4.92)"),
        claims.row_cells(lag, "185.0 ms (fastest 150.0)", "—", "—"),
    ]


def test_the_results_block_agrees_with_its_figures() -> None:
    """Invariant: in the latest round's block, each target row's verdict follows from its
    figure and target, and the sentences under the table are exactly the ones it gives."""
    assert claims.problems(PERFORMANCE.read_text(encoding="utf-8")) == []


def test_a_planted_contradiction_in_the_block_is_found() -> None:
    """A sentence whose figure differs from the table's, a verdict its figure does not give,
    and a target that is not the one set are each reported; the untouched page is clean."""
    page = _page(_sample_rows())
    assert claims.problems(page) == []
    assert "- µs per step, N = 10: 3.27× the typed floor" in page
    assert "misses by 64 %" in page and "misses by 54 %" in page
    sentence = page.replace("10: 3.27× the typed floor", "10: 1.90× the typed floor")
    assert claims.problems(sentence) == [
        "the sentences under '### The round in sentences' are not the table's"
    ]
    verdict = page.replace("| ≤ 2× | no (misses by 64 %) |", "| ≤ 2× | yes |")
    assert any("'met' says 'yes'" in p for p in claims.problems(verdict))
    target = page.replace("| ≤ 2× |", "| ≤ 4× |")
    assert any("the target shown is '≤ 4×'" in p for p in claims.problems(target))


def test_a_partial_round_merges_its_rows_into_the_block() -> None:
    """``claims.merged`` (``run.py --merge``) replaces the rows a partial round measured, drops
    a row whose label is no longer a target, keeps the others, writes the sentences again from
    the merged table and says on the first line what was measured again; the page stays clean."""
    step = claims.BY_LABEL["µs per step, N = 10"]
    old = _page(_sample_rows()).replace(claims.IMPORT, "import fsm_agent")
    counted = claims.BY_LABEL[f"{claims.IMPORT}, in instructions"]
    rows = {
        row[0]: claims.Row(*row)
        for row in (
            claims.row_cells(claims.BY_LABEL[claims.IMPORT], "99.0 ms (fastest 90.0)", "—", "—"),
            claims.row_cells(counted, "800.0 M", "250.0 M (import pydantic)", "3.20×"),
        )
    }
    start, end = old.index(claims.START) + len(claims.START), old.index(claims.END)
    page = old[:start] + claims.merged(old[start:end], rows, "measured again") + old[end:]
    assert claims.problems(page) == []
    table = claims.parse(claims.block(page))
    assert list(table) == [step.label, claims.IMPORT, counted.label]
    assert table[claims.IMPORT].met == "yes" and table[counted.label].met == "yes"
    assert "- import: from fsm_agent import Agent: 99.0 ms (fastest 90.0)" in page
    assert "import fsm_agent" not in claims.block(page).replace(claims.IMPORT, "")


def test_the_page_states_no_figure_of_the_round_outside_its_block() -> None:
    """docs/performance.md states figures only in its results block, in dated sections of
    earlier rounds, and in "Other figures" items naming a script the round does not run."""
    assert stray_figures(PERFORMANCE.read_text(encoding="utf-8")) == []


def test_a_planted_figure_outside_the_block_is_found() -> None:
    """A figure in the page's prose, in an undated earlier round, or in an "Other figures"
    item about the round's own scripts is reported."""
    page = _page(_sample_rows())
    assert stray_figures(page) == []
    intro = page.replace("# Performance\n", "# Performance\n\nA step costs 1.9× the floor.\n")
    assert stray_figures(intro) == ["intro: 1.9×"]
    undated = page.replace("### 2026-11-24: an earlier round", "### An earlier round")
    assert stray_figures(undated) == ["### An earlier round: 3.27×"]
    other = page + f"\n{OTHER}\n\n- Lag (`benchmarks/durable_lag.py`): 4 ms.\n"
    assert len(stray_figures(other)) == 1
    allowed = page + f"\n{OTHER}\n\n- Proofs (`benchmarks/proof_time.py`): 0.1 ms.\n"
    assert stray_figures(allowed) == []


@pytest.mark.parametrize("claim", README_CLAIMS)
def test_the_readme_comparison_holds_in_the_latest_round(claim: str) -> None:
    """Each comparison the README makes in words is in the README and holds for every figure
    of the round it refers to that the round measured (none measured: reported as a skip)."""
    readme = " ".join(README.read_text(encoding="utf-8").split())
    assert claim in readme
    figures, low, high = README_CLAIMS[claim]
    measured = [value for value in figures(_round()) if value is not None]
    if not measured:
        pytest.skip(f"the latest round did not measure the figures of {claim!r}")
    assert all(low <= value <= high for value in measured), measured


def test_a_planted_readme_comparison_the_round_contradicts_fails() -> None:
    """The check reads the round's figures: with a step at 5.5× the typed floor, "a small
    multiple" (at most 5×) fails; at 3.27× it holds."""
    figures, low, high = README_CLAIMS["costs a small multiple of"]
    rows = claims.parse(claims.block(_page(_sample_rows())))
    assert figures(rows)[1] == 3.27 and low <= 3.27 <= high
    step = claims.BY_LABEL["µs per step, N = 10"]
    worse = claims.parse(claims.block(_page([claims.row_cells(step, "90", "16", "5.50×")])))
    assert figures(worse)[1] == 5.5 and not low <= 5.5 <= high


def test_every_comparison_in_words_is_a_checked_claim() -> None:
    """The README and the docs pages make no comparison in words ("faster than", "weighs", "a
    small multiple of") that is not a claim checked above; a planted one is found."""
    pages = [(p.name, p.read_text(encoding="utf-8")) for p in PAGES if p != PERFORMANCE]
    assert unchecked_comparisons(pages) == []
    planted = [("page.md", "Its step is three times faster than the typed floor.")]
    assert len(unchecked_comparisons(planted)) == 1


def test_no_other_page_states_a_measured_figure() -> None:
    """Pages other than docs/performance.md state no measured time, size or share in a
    sentence (a planted one is found): the figures live in the round that measures them."""
    found = {
        page.name: MEASURED.findall(" ".join(FENCED.sub("", page.read_text()).split()))
        for page in PAGES
        if page != PERFORMANCE
    }
    assert {name: hits for name, hits in found.items() if hits} == {}
    assert MEASURED.findall("Loading the bundle takes about 30 ms.") == ["takes about 30 ms"]
