"""The fuzzer's engine: seeded byte strings, decoded into cases, run on the real kernel and
checked against every invariant; the first failing one shrunk.

Example ``index`` of the session with ``seed`` is always the same byte string (drawn by its own
``random.Random``), so a session split over processes runs the same examples as one process,
and a seed reproduces its report. Nothing here imports hypothesis.

A time limit is a budget, not a hint: the example in progress when it ends is cut (its event
loop is stopped at that instant), counted apart as cut, neither a pass nor a violation, and
shrinking stops there too. An example is cut where it awaits: code that blocks the event loop
without awaiting (a synchronous ``time.sleep`` in a tool) is cut when it next awaits.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

from ..errors import ConfigurationError
from ..kernel.handoffs import graph_agents
from ..kernel.plan import handoff_plan, plan_of
from ..providers._output import answer_tool
from ..values.messages import ToolDefinition
from .case import AgentFactory, FuzzCase, FuzzModel, run_case
from .decoding import CASE_SIZE, Choices, read_case
from .invariants import InvariantViolation, RunRecord, check_invariants
from .seam_checks import RunCrashed, SeamViolation, check_seam_record
from .seams import ALL_ATTACKS, Attack, SeamCase, SeamRecord, read_seam_case, run_seam_case
from .shrink import MAX_SECONDS, shrink

__all__ = [
    "BATCH",
    "MODES",
    "Cut",
    "Engine",
    "Found",
    "Mode",
    "ModeName",
    "Session",
    "definitions_of",
    "example_bytes",
]

ModeName: TypeAlias = Literal["runs", "seams"]
"""What the fuzzer attacks: ``runs`` (model scripts, limits and hooks on a virtual clock) or
``seams`` (the real clock, outside cancels, stalled listeners, failing user code and stores)."""


@dataclass(frozen=True, slots=True)
class Mode:
    """How one mode decodes a case, plays it, checks it, and names the path it took."""

    read: Callable[[Choices, Iterable[ToolDefinition] | None, frozenset[Attack]], Any]
    play: Callable[[Any, AgentFactory | None, asyncio.AbstractEventLoop], Any]
    check: Callable[[Any], int]
    path: Callable[[Any], int]
    tries: int = 1  # runs of a shrinking candidate before it counts as passing


def _run_path(record: RunRecord) -> int:
    return hash(tuple(m.row for m in record.result.trace))


def _checked_and_closed(record: SeamRecord) -> int:
    """:func:`check_seam_record`, then the record's store released."""
    try:
        return check_seam_record(record)
    finally:
        record.close()


def _seam_path(record: SeamRecord) -> int:
    rs = record.run_state
    return hash((record.ending, tuple(m.row for m in rs.trace) if rs is not None else ()))


MODES: dict[str, Mode] = {
    "runs": Mode(
        lambda c, tools, _: read_case(c, tools),
        lambda c, m, loop: run_case(c, m, loop=loop),
        check_invariants,
        _run_path,
    ),
    "seams": Mode(
        read_seam_case,
        lambda c, m, loop: run_seam_case(c, m, loop=loop),
        _checked_and_closed,
        _seam_path,
        tries=3,
    ),
}
"""The fuzzer's modes by name."""

BATCH = 250
"""Examples between two progress reports."""


def example_bytes(seed: int, index: int) -> bytes:
    """The bytes of example ``index`` of the session with ``seed`` (64 to 256 of them)."""
    rng = random.Random(f"{seed}:{index}")
    return rng.randbytes(rng.randint(CASE_SIZE // 2, CASE_SIZE * 2))


def definitions_of(make_agent: AgentFactory | None) -> list[ToolDefinition] | None:
    """The tools of ``make_agent``'s agent, which its cases call, and for an agent with an
    output type the final answer tool, whose schema its scripts' typed answers follow;
    ``None``: the built-in agent."""
    if make_agent is None:
        return None
    agent = make_agent(FuzzModel(()))
    own = plan_of(agent)
    definitions = list(own.tool_definitions)
    for other in graph_agents(agent)[1:]:  # the tools of the agents it may hand off to
        known = {d.name for d in definitions}
        plan = handoff_plan(own, other)
        definitions += [d for d in plan.tool_definitions if d.name not in known]
    if own.output_schema is not None:
        definitions.append(answer_tool(own.output_schema))
    return definitions


@dataclass(frozen=True, slots=True)
class Found:
    """A failing example: its index, its bytes, the case they decode to, and what broke."""

    index: int
    data: bytes
    case: FuzzCase | SeamCase
    error: str
    kind: int | str  # the broken invariant's number, or the name of the exception the run raised

    @property
    def invariant(self) -> int | None:
        """The broken invariant's number; ``None`` when the run raised instead of ending."""
        return self.kind if isinstance(self.kind, int) else None


@dataclass
class Session:
    """What one engine run did: counts, paths seen, the slowest example, the failure found."""

    examples: int = 0
    invariants: int = 0
    paths: set[int] = field(default_factory=set)  # hashes of move sequences (table rows fired)
    slowest_s: float = 0.0
    slowest_data: bytes | None = None
    found: Found | None = None
    cut: int = 0  # examples the time limit stopped before their end (0 or 1)


def _found(index: int, data: bytes, case: FuzzCase | SeamCase, exc: Exception) -> Found:
    if isinstance(exc, InvariantViolation | SeamViolation):
        return Found(index, data, case, str(exc), exc.number)
    if isinstance(exc, RunCrashed):
        return Found(index, data, case, str(exc), exc.kind)
    kind = type(exc).__qualname__
    return Found(index, data, case, f"the run raised {kind}: {exc}", kind)


def check_limits(examples: int, max_seconds: float | None) -> None:
    """Refuse a session that could run no example: ``examples`` below 1, or a time limit
    that is not a finite number of seconds above 0."""
    if examples < 1:
        raise ConfigurationError(f"examples must be at least 1, got {examples}")
    if max_seconds is not None and not (math.isfinite(max_seconds) and max_seconds > 0):
        raise ConfigurationError(
            f"max_seconds must be a finite number of seconds greater than 0, got {max_seconds}"
            " (leave it out for no time limit)"
        )


class Engine:
    """Runs examples of one mode on the built-in agent or ``make_agent``'s, on one event loop."""

    def __init__(
        self,
        make_agent: AgentFactory | None,
        seed: int,
        mode: ModeName = "runs",
        attacks: frozenset[Attack] = ALL_ATTACKS,
    ) -> None:
        self.seed = seed
        self.mode = MODES[mode]
        self.attacks = attacks
        self.use(make_agent)
        self._stopped = False  # the time limit stopped the loop during the current example
        self._leftovers = False  # a cut example left tasks on the loop
        # A plain loop, not asyncio.Runner: in 3.11 its SIGINT check formats the repr of every
        # run's result (milliseconds per example).
        self.loop = asyncio.new_event_loop()

    def use(self, make_agent: AgentFactory | None) -> None:
        """Fuzz ``make_agent``'s agent from now on: for an agent whose tools are opened on the
        engine's loop (an MCP server's), which the engine must exist to give."""
        self.make_agent = make_agent
        self.definitions = definitions_of(make_agent)

    def close(self) -> None:
        """Close the event loop (first cancelling what a cut example left on it)."""
        self._clear()
        self.loop.close()

    def _clear(self) -> None:
        """Cancel what a cut example left on the loop, so nothing of it runs on."""
        if self._leftovers:
            self._leftovers = False
            _cancel_leftovers(self.loop)

    def case(self, data: bytes) -> FuzzCase | SeamCase:
        """The case ``data`` decodes to."""
        case: FuzzCase | SeamCase = self.mode.read(Choices(data), self.definitions, self.attacks)
        return case

    def _check(self, case: FuzzCase | SeamCase, end: float | None = None) -> tuple[int, int]:
        """Play ``case`` and check it: (invariants checked, the path's hash). Raises
        :class:`Cut` when ``time.time()`` reaches ``end`` before the case ends."""
        self._clear()
        timer, self._stopped = None, False
        if end is not None:
            timer = self.loop.call_later(max(0.0, end - time.time()), self._stop)
        try:
            record = self.mode.play(case, self.make_agent, self.loop)
        except RuntimeError:  # "Event loop stopped before Future completed", if we stopped it
            if self._stopped:
                self._leftovers = True
                raise Cut from None
            raise
        finally:
            if timer is not None:
                timer.cancel()
        return self.mode.check(record), self.mode.path(record)

    def _stop(self) -> None:
        self._stopped = True
        self.loop.stop()

    def run(
        self,
        indices: Iterable[int],
        end: float | None = None,
        progress: Callable[[Session], None] | None = None,
    ) -> Session:
        """Run the examples at ``indices`` until one fails (recorded unshrunk in ``found``),
        they run out, or ``time.time()`` reaches ``end``: the example in progress then is cut
        (counted in ``cut``, not in ``examples``), so the session ends at ``end`` even when no
        example finished; ``progress`` sees the session every :data:`BATCH` examples and at
        the end."""
        session = Session()
        for index in indices:
            if end is not None and time.time() >= end:
                break
            data = example_bytes(self.seed, index)
            case = self.case(data)
            began = time.perf_counter()
            try:
                checked, path = self._check(case, end)
            except Cut:
                session.cut += 1
                break
            except Exception as exc:  # a broken invariant, or a crash of the run
                session.examples += 1  # it ran: the report counts it
                session.found = _found(index, data, case, exc)
                return session
            took = time.perf_counter() - began
            session.examples += 1
            session.invariants += checked
            session.paths.add(path)
            if took > session.slowest_s:
                session.slowest_s, session.slowest_data = took, data
            if progress is not None and session.examples % BATCH == 0:
                progress(session)
        if progress is not None and session.examples % BATCH:
            progress(session)
        return session

    def shrink(self, found: Found, end: float | None = None) -> Found:
        """The smallest example found that fails like ``found``: the same invariant, or for a
        crash the same exception type (see :mod:`.shrink`), found before ``time.time()``
        reaches ``end``. A mode on the real clock tries each candidate up to ``mode.tries``
        times: a timing-dependent failure that did not happen once may happen the next time."""
        smallest = [found]
        budget = MAX_SECONDS if end is None else min(MAX_SECONDS, end - time.time())

        def fails(data: bytes) -> bool:
            case = self.case(data)
            for _ in range(self.mode.tries):
                try:
                    self._check(case, end)
                except Cut:
                    return False  # the time is up: shrink() stops at its own budget next
                except Exception as exc:
                    candidate = _found(found.index, data, case, exc)
                    if candidate.kind == found.kind:
                        smallest[0] = candidate  # shrink() returns the last one that failed
                        return True
            return False

        shrink(found.data, fails, max_seconds=budget)
        return smallest[0]


class Cut(Exception):
    """The time limit ended the example in progress before it ended by itself."""


def _cancel_leftovers(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel the tasks a cut example left on ``loop`` and give them a moment to unwind (a
    task that ignores its cancellation is left behind, not waited for)."""
    tasks = asyncio.all_tasks(loop)
    for task in tasks:
        task.cancel()
    if tasks:
        loop.run_until_complete(asyncio.wait(tasks, timeout=1.0))
    loop.run_until_complete(loop.shutdown_asyncgens())
