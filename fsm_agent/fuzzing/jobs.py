"""``fsm-agent fuzz --jobs N``: one fuzzing session split over N processes.

Process ``j`` runs examples ``j``, ``j + N``, ``j + 2N``… of the session's seed, so the N
processes run the examples one process would. A process that finds a failing example tells
the others to stop before any later example, so the failure reported (the first by example
index, shrunk in the process that found it) is the one a single process reports. The summary
adds up the processes' counts and unites their paths. Processes start with the ``spawn``
method: a ``module:factory`` target is imported by name in each. They ignore Ctrl-C: the
terminal sends it to every process of the group, and the parent alone answers it, by stopping
them (so a user sees one line, not a traceback per process).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import queue
import random
import signal
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from multiprocessing.sharedctypes import Synchronized
from typing import Any

from ..targets import load_factory
from . import FuzzProgress, FuzzReport, fuzz_failure
from .engine import Engine, Found, ModeName, Session, check_limits
from .seams import Attack

__all__ = ["fuzz_in_processes"]

_POLL_S = 0.5


@dataclass(frozen=True, slots=True)
class _Counts:
    """One process's counts so far (sent with every progress report)."""

    examples: int
    invariants: int
    slowest_s: float


@dataclass(frozen=True, slots=True)
class _Result:
    """What one process did (a failure as its bytes: the parent decodes them again)."""

    counts: _Counts
    paths: set[int]
    slowest_data: bytes | None
    failure: tuple[int, bytes, str, int | str] | None  # index, bytes, error, kind


def _counts(session: Session) -> _Counts:
    return _Counts(session.examples, session.invariants, session.slowest_s)


def _job(
    target: str | None,
    job: int,
    jobs: int,
    examples: int,
    seed: int,
    end: float | None,
    messages: multiprocessing.Queue[tuple[str, int, Any]],
    first_failure: Synchronized[int],
    mode: ModeName,
    attacks: frozenset[Attack],
) -> None:
    """One process's share of the session; everything it reports goes to ``messages``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops us (see the module)
    try:
        engine = Engine(None if target is None else load_factory(target), seed, mode, attacks)

        def indices() -> Iterator[int]:
            for index in range(job, examples, jobs):
                if index >= first_failure.value:
                    return  # another process failed at an earlier example
                yield index

        sent: set[int] = set()

        def progress(session: Session) -> None:
            messages.put(("progress", job, (_counts(session), session.paths - sent)))
            sent.update(session.paths)

        session = engine.run(indices(), end, progress)
        failure = None
        if session.found is not None:
            with first_failure.get_lock():
                first = first_failure.value = min(first_failure.value, session.found.index)
            if first == session.found.index:  # else an earlier failure is reported instead
                found = engine.shrink(session.found)
                failure = (found.index, found.data, found.error, found.kind)
        engine.close()
        result = _Result(_counts(session), session.paths, session.slowest_data, failure)
        messages.put(("done", job, result))
    except Exception as exc:  # the factory could not build an agent, or a bug in the fuzzer
        messages.put(("error", job, f"{type(exc).__name__}: {exc}"))


@contextlib.contextmanager
def _ctrl_c_ignored() -> Iterator[None]:
    """Ignore SIGINT meanwhile, in the main thread (where signals are handled): processes
    started inside begin with it ignored, before :func:`_job` can say so."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def fuzz_in_processes(
    target: str | None,
    *,
    jobs: int,
    examples: int,
    seed: int | None = None,
    max_seconds: float | None = None,
    progress: Callable[[FuzzProgress], None] | None = None,
    mode: ModeName = "runs",
    attacks: Iterable[Attack | str] = frozenset(Attack),
) -> FuzzReport:
    """:func:`~fsm_agent.fuzzing.fuzz` over ``jobs`` processes, for the agent ``target``
    (``"module:factory"``) or the built-in one, in ``mode``; raises ``RuntimeError`` when a
    process fails."""
    check_limits(examples, max_seconds)
    started = time.perf_counter()
    base = seed if seed is not None else random.randrange(2**32)
    make_agent = None if target is None else load_factory(target)
    chosen = frozenset(Attack(a) for a in attacks)
    engine = Engine(make_agent, base, mode, chosen)  # also checks the factory before starting
    engine.close()
    context = multiprocessing.get_context("spawn")
    messages: multiprocessing.Queue[tuple[str, int, Any]] = context.Queue()
    first_failure = context.Value("q", examples)
    end = None if max_seconds is None else time.time() + max_seconds
    processes = [
        context.Process(
            target=_job,
            args=(target, job, jobs, examples, base, end, messages, first_failure, mode, chosen),
            daemon=True,
        )
        for job in range(jobs)
    ]
    with _ctrl_c_ignored():  # inherited by the new processes from their start
        for process in processes:
            process.start()
    counts: dict[int, _Counts] = {}
    paths: set[int] = set()
    results: dict[int, _Result] = {}
    try:
        while len(results) < jobs:
            try:
                what, job, payload = messages.get(timeout=_POLL_S)
            except queue.Empty:
                for job, process in enumerate(processes):
                    if job not in results and process.exitcode not in (None, 0):
                        raise RuntimeError(
                            f"fuzz process {job} exited with code {process.exitcode}"
                        ) from None
                continue
            if what == "error":
                raise RuntimeError(payload)
            if what == "progress":
                counts[job], new_paths = payload
                paths |= new_paths
            else:
                results[job] = payload
                counts[job] = payload.counts
                paths |= payload.paths
            if progress is not None:
                progress(_progress(counts, len(paths), time.perf_counter() - started))
    finally:
        for process in processes:
            if process.is_alive() and len(results) < jobs:
                process.terminate()
            process.join()
    failures = [r.failure for r in results.values() if r.failure is not None]
    failure = None
    if failures:
        index, data, error, kind = min(failures)
        case = engine.case(data)
        failure = fuzz_failure(Found(index, data, case, error, kind), make_agent, target)
    slowest = max(results.values(), key=lambda r: r.counts.slowest_s)
    return FuzzReport(
        examples=sum(r.counts.examples for r in results.values()),
        distinct_paths=len(paths),
        invariants_checked=sum(r.counts.invariants for r in results.values()),
        elapsed_s=time.perf_counter() - started,
        seed=base,
        slowest_s=slowest.counts.slowest_s,
        slowest_case=None if slowest.slowest_data is None else engine.case(slowest.slowest_data),
        failure=failure,
    )


def _progress(counts: dict[int, _Counts], paths: int, elapsed_s: float) -> FuzzProgress:
    return FuzzProgress(
        sum(c.examples for c in counts.values()),
        paths,
        sum(c.invariants for c in counts.values()),
        elapsed_s,
        max(c.slowest_s for c in counts.values()),
    )
