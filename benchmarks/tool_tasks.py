"""The task suite of ``tool_eval.py``: tool tasks whose answers a model cannot know.

Every fact sits behind the ``lookup`` tool and is made up (names, codes and numbers that exist
nowhere else); the arithmetic is too large to do in one's head and must go through ``add`` and
``multiply``; two-step tasks need a lookup whose result names the next lookup; order tasks must
place exactly one order and then stop. Each task has an exactly checkable answer.

The split into a development half and a held-out half is fixed here, by the task list: the
prompts, the verifier and the phase design of ``tool_eval.py`` are never tuned on the held-out
half, and the two halves are reported apart.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from fsm_agent import TaskComplete, tool

__all__ = ["FACTS", "TASKS", "Kind", "Ledger", "Split", "Task", "answer_matches", "tools_for"]


class Split(StrEnum):
    """Which half of the suite a task belongs to."""

    DEV = "dev"
    HELD_OUT = "held_out"


class Kind(StrEnum):
    """What a task asks of the model."""

    LOOKUP = "lookup"  # one made-up fact
    ARITHMETIC = "arithmetic"  # a sum or product too large to do in one's head
    TWO_STEP = "two_step"  # a lookup whose result names the next lookup
    LOOKUP_ARITHMETIC = "lookup_arithmetic"  # facts, then arithmetic on them
    STOP = "stop"  # place exactly one order, answer, and stop


@dataclass(frozen=True)
class Task:
    """One task: its id, half, kind, prompt and the text its answer must contain."""

    id: str
    split: Split
    kind: Kind
    prompt: str
    answer: str


# The made-up directory behind ``lookup``: an entry's name, and what a lookup of it returns.
FACTS: dict[str, str] = {
    # dev half
    "Quarnel lab": "Quarnel lab: door code 7319.",
    "Velbrook office": "Velbrook office: located in the city of Osterhaven.",
    "Tamsin Orrell": "Tamsin Orrell: badge number 48215.",
    "Hollis release": "Hollis release: codename Fernwhistle.",
    "Korvath team": "Korvath team: led by Ines Baldwick.",
    "Ines Baldwick": "Ines Baldwick: badge number 60271.",
    "Pello Straam": "Pello Straam: works in the Ostrid lab.",
    "Ostrid lab": "Ostrid lab: door code 2584.",
    "Mirrow project": "Mirrow project: owned by the Tessaly team.",
    "Tessaly team": "Tessaly team: budget code BX-4471.",
    "Garnet ticket 118": "Garnet ticket 118: assigned to Odo Pranck.",
    "Odo Pranck": "Odo Pranck: desk number 3306.",
    "Blaxo": "Blaxo: 1287 units in stock.",
    "Quindle": "Quindle: 946 units in stock.",
    "Zemmet crate": "Zemmet crate: weighs 347 kilograms.",
    # held-out half
    "Sorvik lab": "Sorvik lab: door code 9052.",
    "Palder office": "Palder office: located in the city of Wenmarsh.",
    "Rhun Castellan": "Rhun Castellan: badge number 71934.",
    "Ambrel release": "Ambrel release: codename Stillgrove.",
    "Dunmore team": "Dunmore team: led by Yara Fensk.",
    "Yara Fensk": "Yara Fensk: badge number 35608.",
    "Lio Marrant": "Lio Marrant: works in the Callow lab.",
    "Callow lab": "Callow lab: door code 6147.",
    "Brisk project": "Brisk project: owned by the Ulvane team.",
    "Ulvane team": "Ulvane team: budget code QT-9023.",
    "Cobalt ticket 407": "Cobalt ticket 407: assigned to Mave Ildor.",
    "Mave Ildor": "Mave Ildor: desk number 5172.",
    "Trennel": "Trennel: 2318 units in stock.",
    "Voskin": "Voskin: 1759 units in stock.",
    "Harrow crate": "Harrow crate: weighs 589 kilograms.",
}

_ORDERS: dict[str, str] = {
    "Tarvo lamp": "ORD-58213",
    "Welk chair": "ORD-30476",
    "Ispen kettle": "ORD-71908",
    "Morrow desk": "ORD-46625",
}


def _tasks() -> tuple[Task, ...]:
    dev, ho = Split.DEV, Split.HELD_OUT
    lk, ar, two, la, stop = (
        Kind.LOOKUP,
        Kind.ARITHMETIC,
        Kind.TWO_STEP,
        Kind.LOOKUP_ARITHMETIC,
        Kind.STOP,
    )
    rows: list[tuple[Split, Kind, str, str]] = [
        (dev, lk, "What is the door code of the Quarnel lab?", "7319"),
        (dev, lk, "In which city is the Velbrook office?", "Osterhaven"),
        (dev, lk, "What is the badge number of Tamsin Orrell?", "48215"),
        (dev, lk, "What is the codename of the Hollis release?", "Fernwhistle"),
        (dev, ar, "What is 48213 multiplied by 917?", str(48213 * 917)),
        (dev, ar, "What is 739281 plus 584936?", str(739281 + 584936)),
        (dev, ar, "What is 3847 times 2906?", str(3847 * 2906)),
        (dev, ar, "What is 90417 plus 38869?", str(90417 + 38869)),
        (dev, two, "What is the badge number of the person who leads the Korvath team?", "60271"),
        (dev, two, "What is the door code of the lab Pello Straam works in?", "2584"),
        (dev, two, "What is the budget code of the team that owns the Mirrow project?", "BX-4471"),
        (
            dev,
            two,
            "What is the desk number of the person Garnet ticket 118 is assigned to?",
            "3306",
        ),
        (dev, la, "How many units of Blaxo and Quindle are in stock together?", str(1287 + 946)),
        (dev, la, "What do 12 Zemmet crates weigh in kilograms?", str(347 * 12)),
        (dev, stop, "Place one order for a Tarvo lamp and tell me the order number.", "ORD-58213"),
        (dev, stop, "Place one order for a Welk chair and tell me the order number.", "ORD-30476"),
        (ho, lk, "What is the door code of the Sorvik lab?", "9052"),
        (ho, lk, "In which city is the Palder office?", "Wenmarsh"),
        (ho, lk, "What is the badge number of Rhun Castellan?", "71934"),
        (ho, lk, "What is the codename of the Ambrel release?", "Stillgrove"),
        (ho, ar, "What is 62917 multiplied by 483?", str(62917 * 483)),
        (ho, ar, "What is 815207 plus 296684?", str(815207 + 296684)),
        (ho, ar, "What is 5308 times 7741?", str(5308 * 7741)),
        (ho, ar, "What is 47733 plus 95819?", str(47733 + 95819)),
        (ho, two, "What is the badge number of the person who leads the Dunmore team?", "35608"),
        (ho, two, "What is the door code of the lab Lio Marrant works in?", "6147"),
        (ho, two, "What is the budget code of the team that owns the Brisk project?", "QT-9023"),
        (
            ho,
            two,
            "What is the desk number of the person Cobalt ticket 407 is assigned to?",
            "5172",
        ),
        (ho, la, "How many units of Trennel and Voskin are in stock together?", str(2318 + 1759)),
        (ho, la, "What do 15 Harrow crates weigh in kilograms?", str(589 * 15)),
        (
            ho,
            stop,
            "Place one order for an Ispen kettle and tell me the order number.",
            "ORD-71908",
        ),
        (
            ho,
            stop,
            "Place one order for a Morrow desk and tell me the order number.",
            "ORD-46625",
        ),
    ]
    counts: dict[Split, int] = {}
    tasks: list[Task] = []
    for split, kind, prompt, answer in rows:
        counts[split] = counts.get(split, 0) + 1
        tasks.append(Task(f"{split.value}-{counts[split]:02d}", split, kind, prompt, answer))
    return tuple(tasks)


TASKS: tuple[Task, ...] = _tasks()
"""The suite: 32 tasks, 16 in each half, the same kinds in each."""


@dataclass
class Ledger:
    """What one run's tools saw: every result they returned and the orders placed."""

    results: list[str] = field(default_factory=list)
    orders: list[str] = field(default_factory=list)

    def grounded(self, answer: str) -> str | None:
        """``None`` when ``answer`` uses a value a tool returned, else why it does not: a
        check that knows no task's answer (a number, a code or a capitalised name of a result
        must appear in the answer)."""
        if not self.results:
            return "No tool was called: call the tools to get the facts, then answer."
        values = {v for r in self.results for v in re.findall(r"[A-Z][\w-]{3,}|\d[\w-]*", r)}
        if any(_contains(answer, value) for value in values):
            return None
        return "The answer does not use any value the tools returned: answer with that value."


def _normalised(text: str) -> str:
    return re.sub(r"(?<=\d),(?=\d{3}\b)", "", text).casefold()


def _contains(text: str, value: str) -> bool:
    pattern = rf"(?<![\w.-]){re.escape(value.casefold())}(?:\.0+)?(?![\w-])"
    return re.search(pattern, _normalised(text)) is not None


def answer_matches(task: Task, output: str | None, ledger: Ledger) -> bool:
    """Whether ``output`` holds the task's answer (digits grouped with commas are read as one
    number), and, for an order task, exactly one order was placed."""
    if output is None or not _contains(output, task.answer):
        return False
    return task.kind is not Kind.STOP or len(ledger.orders) == 1


def _lookup_in(name: str) -> str:
    wanted = name.casefold().strip()
    for key in sorted(FACTS, key=len, reverse=True):  # the longest name first: "X team" over "X"
        if key.casefold() in wanted or (len(wanted) >= 4 and wanted in key.casefold()):
            return FACTS[key]
    return f"No entry named {name!r}. Look up one name at a time, as written in the question."


def tools_for(ledger: Ledger, *, done: bool = False) -> list[Any]:
    """The suite's tools for one run, recording into ``ledger``; ``done``: also a ``done``
    tool that accepts only an answer that uses a tool's result."""

    def seen(result: str) -> str:
        ledger.results.append(result)
        return result

    @tool
    def lookup(name: str) -> str:
        """Look up a person, team, project, place or item by name in the company directory."""
        return seen(_lookup_in(name))

    @tool
    def add(a: int, b: int) -> str:
        """Add two integers."""
        return seen(str(a + b))

    @tool
    def multiply(a: int, b: int) -> str:
        """Multiply two integers."""
        return seen(str(a * b))

    @tool
    def place_order(item: str) -> str:
        """Place an order for one item; returns the order number."""
        wanted = item.casefold()
        number = next((n for key, n in _ORDERS.items() if key.casefold() in wanted), "ORD-10000")
        ledger.orders.append(item)
        return seen(f"Order placed: {number}.")

    tools: list[Any] = [lookup, add, multiply, place_order]
    if done:

        @tool
        def done(message: str) -> str:
            """Call this when the task is complete, with the final answer for the user."""
            problem = ledger.grounded(message)
            if problem is not None:
                return f"Not accepted: {problem}"
            raise TaskComplete(message)

        tools.append(done)
    return tools
