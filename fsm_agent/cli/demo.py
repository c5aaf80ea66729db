"""``fsm-agent demo``: an offline agent on a scripted model, traced as it walks the machine; and
the small tools ``fsm-agent run`` offers.

The demo is a scripted run that walks the interesting parts of the machine in a few moves: two
tool calls, a model error that is retried after backoff, and an answer the verifier rejects
before it accepts the second one. Backoff sleeps on a virtual clock, so the run takes
milliseconds, and the run id is fixed, so the run is the same every time.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime
from pathlib import Path

from .. import diagrams
from ..errors import ProviderServerError
from ..kernel.agent import Agent, Runtime
from ..kernel.states import Verdict
from ..models.scripted import ScriptedModel, VirtualClock, fail, text, tool_call
from ..policy import Policy, RetryPolicy
from ..run.events import Event
from ..tools import Tool, tool
from .args import UsageError, writable_file, write_output
from .trace import Trace, add_record_option, drive, ended_ok, labels, open_recording

__all__ = [
    "DEMO_POLICY",
    "DEMO_PROMPT",
    "DEMO_TOOLS",
    "add_arguments",
    "demo_agent",
    "demo_drawing",
    "demo_events",
    "handle",
]


@tool
def add(a: float, b: float) -> float:
    """Add two numbers."""
    return a + b


@tool
def multiply(a: float, b: float) -> float:
    """Multiply two numbers."""
    return a * b


@tool
def utc_now() -> str:
    """The current date and time in UTC, as ISO 8601."""
    return datetime.now(UTC).isoformat(timespec="seconds")


DEMO_TOOLS: tuple[Tool, ...] = (add, multiply, utc_now)
"""The built-in tools of the demo and of ``fsm-agent run``."""

DEMO_PROMPT = "I buy 3 notebooks at €4 each and a pen at €5. What do I pay?"
"""The demo's task."""

DEMO_POLICY = Policy(max_steps=8, retry=RetryPolicy(max_retries=2, base_delay_s=1.0))
"""The demo's limits: small numbers, so the diagram's guards read clearly."""


def _currency_verifier(*, output: str, **_: object) -> Verdict:
    """Accept an answer only when it states the currency."""
    if "€" in output:
        return Verdict.accept()
    return Verdict.reject("Give the amount with its currency (€).")


def demo_agent(clock: VirtualClock | None = None) -> Agent[None]:
    """The demo agent: a scripted model, two arithmetic tools and a currency verifier."""
    clock = clock or VirtualClock()
    model = ScriptedModel(
        [
            tool_call("multiply", {"a": 3, "b": 4}, text="First the notebooks."),
            fail(ProviderServerError("503 Service Unavailable: overloaded", status_code=503)),
            tool_call("add", {"a": 12, "b": 5}, text="Now add the pen."),
            text("The total is 17."),
            text("3 × €4 = €12, plus the €5 pen: you pay €17."),
        ],
        name="scripted-demo",
    )
    return Agent(
        model,
        tools=DEMO_TOOLS,
        system_prompt="You are a careful shop assistant. Use the tools for arithmetic.",
        policy=DEMO_POLICY,
        verifier=_currency_verifier,
        runtime=Runtime(
            sleep=clock.sleep, clock=clock.now, random=random.Random(0), new_id=lambda: "run_demo"
        ),
    )


def demo_events() -> AsyncIterator[Event]:
    """The events of one demo run, as they happen."""
    return demo_agent().run_stream(DEMO_PROMPT)


def demo_drawing(events: Sequence[Event]) -> diagrams.Plan:
    """The demo's machine (its policy's numbers, a verifier) with the run ``events`` tell."""
    return diagrams.plan(
        scope=diagrams.Scope.of(DEMO_POLICY, verifier=True),
        run=diagrams.RunPath.from_events(events),
        title="fsm_agent: the demo run",
    )


# --- the command ----------------------------------------------------------------------------------

_DIAGRAM_SUFFIXES = (".svg", ".png", ".dot", ".gv", ".mmd")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``fsm-agent demo``."""
    add_record_option(parser)
    parser.add_argument(
        "--diagram",
        metavar="FILE",
        default="fsm-agent-demo.svg",
        help="where to draw the machine with the run on it; the suffix picks the format "
        "(.svg, .png, .dot, .mmd; default: %(default)s)",
    )
    parser.add_argument("--no-diagram", action="store_true", help="do not write a diagram")


def handle(args: argparse.Namespace) -> int:
    """Run the demo: 0 when it ends in ``done``."""
    if not args.no_diagram:
        suffix = Path(args.diagram).suffix.lower()
        if suffix not in _DIAGRAM_SUFFIXES:
            raise UsageError(
                f"--diagram: unknown suffix {suffix!r}; use one of {', '.join(_DIAGRAM_SUFFIXES)}"
            )
        try:  # checked before the run, so that the run is not lost to a bad path
            writable_file(args.diagram)
        except argparse.ArgumentTypeError as exc:
            raise UsageError(f"--diagram: {exc}") from None
    print("An offline agent on a scripted model: no network, no API key.")
    print(f"task: {DEMO_PROMPT}\n")
    trace = Trace(sys.stdout, labels(DEMO_POLICY, verifier=True), stream_text=False)
    agent = demo_agent()
    recorder = open_recording(args.record, agent, DEMO_PROMPT)
    events = asyncio.run(drive(agent.run_stream(DEMO_PROMPT), trace, recorder))
    if args.record:
        print(f"\nevents recorded in {args.record}")
    if not args.no_diagram:
        path = _write_diagram(demo_drawing(events), args.diagram)
        print(f"the machine with this run drawn on it: {path}")
    return 0 if ended_ok(events) else 1


def _write_diagram(drawing: diagrams.Plan, path: str) -> str:
    """Write ``drawing`` in the format of ``path``'s suffix; without Graphviz, write the DOT
    next to it (and say so) instead of failing the demo."""
    suffix = Path(path).suffix.lower()
    if suffix == ".mmd":
        write_output(path, diagrams.overview_mermaid(drawing))
        return path
    dot = diagrams.overview_dot(drawing)
    if suffix in (".dot", ".gv"):
        write_output(path, dot)
        return path
    try:
        image = diagrams.render(dot, "png" if suffix == ".png" else "svg")
    except diagrams.RenderingUnavailableError as exc:
        fallback = str(Path(path).with_suffix(".dot"))
        write_output(fallback, dot)
        print(f"note: {exc}; wrote the DOT text instead", file=sys.stderr)
        return fallback
    write_output(path, image)
    return path
