"""The targets of ``run.py``'s round, and the sentences it writes from their table.

``run.py`` measures each target as a figure (a same-round ratio to the target's reference, or a
time) and writes the table "fsm_agent against the targets" in ``docs/performance.md``'s results
block, then, from that table alone, the sentences below it (:func:`sentences`). The docs test
(``tests/docs/test_performance_claims.py``) reads the block back with :func:`parse` and checks that
every row's verdict follows from its figure (:func:`verdict`) and that the sentences are the ones
the table gives, so prose about the latest round cannot drift from it. This module imports
nothing but the standard library: the test reads it without the benchmark's dependencies.
"""

from __future__ import annotations

import re
from dataclasses import astuple, dataclass

START, END = "<!-- results:start -->", "<!-- results:end -->"
TABLE_HEADING = "### fsm_agent against the targets"
SENTENCES_HEADING = "### The round in sentences"
COLUMNS = ("measurement", "fsm_agent", "reference", "ratio", "target", "met")
TYPED_FLOOR = "the typed floor, a minimal loop on its own plain pydantic models built per call"


@dataclass(frozen=True, slots=True)
class Target:
    """One target: the row's ``label``, what its figure is measured against (``reference``),
    the ``limit`` and its direction (``at_most``), and the unit of the figure (``"×"`` for a
    same-round ratio, in the ratio column; ``"ms"`` for a time, in the fsm_agent column)."""

    label: str
    reference: str
    limit: float
    unit: str = "×"
    at_most: bool = True

    @property
    def text(self) -> str:
        """The target as the table shows it, e.g. ``≤ 2×``."""
        sign = "≤" if self.at_most else "≥"
        space = "" if self.unit == "×" else " "
        return f"{sign} {self.limit:g}{space}{self.unit}"


IMPORT = "import: from fsm_agent import Agent"
"""The import a program that runs an agent needs (``import fsm_agent`` alone is shown beside)."""
PEER_TARGETS = {"pydantic-ai": 80.0, "LangGraph": 80.0, "openai-agents": 80.0, "smolagents": 15.0}
TARGETS: tuple[Target, ...] = (
    *(Target(f"µs per step, N = {n}", TYPED_FLOOR, 2) for n in (2, 10, 50)),
    *(Target(f"a step in instructions, N = {n}", TYPED_FLOOR, 2) for n in (2, 10, 50)),
    *(
        Target(f"memory per concurrent run, {runs} runs of N = 10", TYPED_FLOOR, 1.2)
        for runs in ("1,000", "10,000")
    ),
    *(
        Target(f"building a response from the wire ({turn})", "the typed floor's reader", 1)
        for turn in ("tool call", "answer")
    ),
    Target("a durable sync step on SQLite", "the same step without a checkpointer", 5),
    Target(
        "a durable sync step on SQLite, in instructions", "the same step without a checkpointer", 5
    ),
    *(
        Target(
            f"worst event-loop lag, 1,000 durable runs in flight on {store} (cold process)",
            "—",
            10,
            "ms",
        )
        for store in ("SQLite", "PostgreSQL")
    ),
    Target(IMPORT, "—", 120, "ms"),
    Target(f"{IMPORT}, in instructions", "import pydantic", 3.3),
    Target("fsm-agent demo --no-diagram", "—", 350, "ms"),
    *(
        Target(
            f"HTTP path, client CPU per step ({mode}, N = 10)",
            "the cheapest peer's client CPU per step",
            0.2,
        )
        for mode in ("JSON", "streamed")
    ),
    *(
        Target(f"{peer} per step ÷ fsm_agent's (least over N)", "fsm_agent", limit, at_most=False)
        for peer, limit in PEER_TARGETS.items()
    ),
)
BY_LABEL = {target.label: target for target in TARGETS}
_NUMBER = re.compile(r"^\s*(\d[\d,]*(?:\.\d+)?)")


def figure(text: str) -> float | None:
    """The number a cell starts with (``"3.27× (2.10–4.00)"`` → 3.27), or ``None``."""
    match = _NUMBER.match(text)
    return float(match.group(1).replace(",", "")) if match else None


def verdict(target: Target, value: float | None) -> str:
    """The "met" cell for ``value``: ``yes``, ``no (misses by 64 %)``, or ``—`` (not measured)."""
    if value is None:
        return "—"
    if target.at_most:
        met, off = value <= target.limit, value / target.limit - 1
    else:
        met, off = value >= target.limit, 1 - value / target.limit
    return "yes" if met else f"no (misses by {off:.0%})".replace("%", " %")


@dataclass(frozen=True, slots=True)
class Row:
    """One row of the targets table, as written."""

    label: str
    ours: str
    reference: str
    ratio: str
    target: str
    met: str

    def value(self, target: Target) -> float | None:
        """The figure compared with ``target``: the ratio, or for a time fsm_agent's figure."""
        return figure(self.ours if target.unit == "ms" else self.ratio)


def row_cells(target: Target, ours: str, reference: str, ratio: str) -> list[str]:
    """A table row for ``target``, its verdict computed from the figure it is compared by."""
    row = Row(target.label, ours, reference, ratio, target.text, "")
    return [target.label, ours, reference, ratio, target.text, verdict(target, row.value(target))]


def block(text: str) -> str:
    """The results block of a performance page."""
    start, end = text.index(START), text.index(END)
    return text[start + len(START) : end]


def parse(results: str) -> dict[str, Row]:
    """The targets table of a results block, by measurement."""
    lines = results[results.index(TABLE_HEADING) :].splitlines()[2:]
    rows: dict[str, Row] = {}
    for line in lines:
        if not line.startswith("|"):
            break
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if tuple(cells) == COLUMNS or set("".join(cells)) <= {"-"}:
            continue
        rows[cells[0]] = Row(*cells)
    return rows


def sentences(rows: dict[str, Row]) -> str:
    """The sentences the targets table gives: one per measured target, naming its reference."""
    lines = []
    for target in TARGETS:
        row = rows.get(target.label)
        if row is None or row.value(target) is None:
            continue
        if target.unit == "ms":
            shown = row.ours
        else:
            shown = f"{row.ratio.split(' (')[0]} {target.reference}"
        met = "met" if row.met == "yes" else row.met.removeprefix("no ").strip("()")
        lines.append(f"- {target.label}: {shown}; the target is {target.text}: {met}.")
    return "\n".join(lines) or "- This round measured none of the targets."


def merged(results: str, rows: dict[str, Row], note: str) -> str:
    """The results block ``results`` with the targets table's ``rows`` replaced by those given
    (the targets a partial round measured again), rows of labels no longer a target left out,
    the sentences written again from the merged table, and ``note`` added to its first line."""
    table = {**{k: v for k, v in parse(results).items() if k in BY_LABEL}, **rows}
    lines = results[results.index(TABLE_HEADING) :].splitlines()[2:]
    old = "\n".join(lines[: next(i for i, line in enumerate(lines) if not line.startswith("|"))])
    new = "\n".join(
        [
            "| " + " | ".join(COLUMNS) + " |",
            "|" + "---|" * len(COLUMNS),
            *(
                "| " + " | ".join(astuple(table[t.label])) + " |"
                for t in TARGETS
                if t.label in table
            ),
        ]
    )
    text = results.replace(old, new, 1)
    said = text[text.index(SENTENCES_HEADING) + len(SENTENCES_HEADING) :]
    text = text.replace(said.strip().split("\n\n")[0].strip(), sentences(parse(text)), 1)
    first = text.lstrip("\n").split("\n", 1)[0]
    return text.replace(first, f"{first.removesuffix('.')}; {note}.", 1)


def problems(text: str) -> list[str]:
    """What in a performance page contradicts its results block: a verdict that does not follow
    from its figure, a target row missing its reference, or sentences that differ from the
    ones the table gives."""
    results = block(text)
    rows = parse(results)
    found = []
    for label, row in rows.items():
        target = BY_LABEL.get(label)
        if target is None:
            continue
        if row.target != target.text:
            found.append(f"{label}: the target shown is {row.target!r}, not {target.text!r}")
        expected = verdict(target, row.value(target))
        if row.met != expected:
            found.append(f"{label}: 'met' says {row.met!r}, its figure gives {expected!r}")
    if SENTENCES_HEADING in results:
        written = results[results.index(SENTENCES_HEADING) + len(SENTENCES_HEADING) :]
        written = written.strip().split("\n\n")[0].strip()
        if written != sentences(rows):
            found.append(f"the sentences under {SENTENCES_HEADING!r} are not the table's")
    else:
        found.append(f"the results block has no {SENTENCES_HEADING!r}")
    return found
