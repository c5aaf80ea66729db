"""``fsm-agent fuzz --jobs N``: one fuzzing session split over N processes.

Process ``j`` runs examples ``j``, ``j + N``, ``j + 2N``… of the session's seed, so the N
processes run the examples one process would. A process that finds a failing example tells
the others to stop before any later example, so the failure reported (the first by example
index, shrunk in the process that found it) is the one a single process reports. The summary
adds up the processes' counts and unites their paths. Processes start with the ``spawn``
method: a ``module:factory`` target is imported by name in each. They ignore Ctrl-C: the
terminal sends it to every process of the group, and the parent alone answers it, by stopping
them (so a user sees one line, not a traceback per process).

The workers die with their parent, however it ends: a SIGTERM to the parent stops them before
it dies of that signal; a parent killed outright (SIGKILL) takes them along, through Linux's
parent-death signal where there is one and, everywhere, a thread in each worker that waits
for the parent's end. With a time limit each worker cuts its example in progress at the end
(see :mod:`.engine`); one that has not reported a few seconds later is stopped and its last
progress report stands, with its example counted as cut.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import multiprocessing
import os
import queue
import random
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from multiprocessing.sharedctypes import Synchronized
from types import FrameType
from typing import Any

from . import FuzzProgress, FuzzReport, fuzz_failure
from .engine import Engine, Found, ModeName, Session, check_limits
from .seams import Attack
from .targets import load_factory

__all__ = ["fuzz_in_processes"]

_POLL_S = 0.5
_GRACE_S = 5.0  # after the time limit, how long a worker has to report before it is stopped
_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>


@dataclass(frozen=True, slots=True)
class _Counts:
    """One process's counts so far (sent with every progress report)."""

    examples: int
    invariants: int
    slowest_s: float
    cut: int = 0


@dataclass(frozen=True, slots=True)
class _Result:
    """What one process did (a failure as its bytes: the parent decodes them again)."""

    counts: _Counts
    paths: set[int]
    slowest_data: bytes | None
    failure: tuple[int, bytes, str, int | str] | None  # index, bytes, error, kind


def _counts(session: Session) -> _Counts:
    return _Counts(session.examples, session.invariants, session.slowest_s, session.cut)


def _die_with_parent() -> None:
    """End this worker when the process that started it ends, even by SIGKILL."""
    parent = multiprocessing.parent_process()
    if parent is None:  # not started by multiprocessing: nothing to follow
        return
    if sys.platform == "linux":
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)

    def watch() -> None:
        parent.join()  # returns when the parent's end of the pipe closes: it is gone
        os._exit(1)  # no cleanup worth doing: the parent will never read the results

    threading.Thread(target=watch, name="fuzz-parent-watch", daemon=True).start()
    if not parent.is_alive():  # it died before prctl was set
        os._exit(1)


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
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})  # held while we started
    _die_with_parent()
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
                found = engine.shrink(session.found, end)
                failure = (found.index, found.data, found.error, found.kind)
        engine.close()
        result = _Result(_counts(session), session.paths, session.slowest_data, failure)
        messages.put(("done", job, result))
    except Exception as exc:  # the factory could not build an agent, or a bug in the fuzzer
        messages.put(("error", job, f"{type(exc).__name__}: {exc}"))


class _Terminated(BaseException):
    """The parent got SIGTERM: raised where it is, so that it stops its workers first."""


@contextlib.contextmanager
def _terminate_stops_workers() -> Iterator[None]:
    """Meanwhile a SIGTERM raises :class:`_Terminated` (in the main thread, where signals
    are handled); once the workers are stopped, the process dies of the signal as it would
    have."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: FrameType | None) -> None:
        raise _Terminated

    previous = signal.getsignal(signal.SIGTERM) or signal.SIG_DFL  # None: not set from Python
    if previous is signal.SIG_IGN:  # the caller chose to ignore it: so do we
        yield
        return
    signal.signal(signal.SIGTERM, stop)
    try:
        yield
    except _Terminated:
        signal.signal(signal.SIGTERM, previous)
        signal.raise_signal(signal.SIGTERM)  # the default action ends the process here
        raise  # the caller's own handler returned: the session ended all the same
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def _ctrl_c_held() -> Iterator[None]:
    """Hold SIGINT back meanwhile, in the main thread (where signals are handled): processes
    started inside begin with it blocked (the mask outlives ``exec``) until :func:`_job` ignores
    it. A Ctrl-C that arrives meanwhile waits, and reaches this process (as
    ``KeyboardInterrupt``) when the block ends, once every process has started."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


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
    with _terminate_stops_workers():
        results = _collect(processes, messages, end, progress, started)
    paths = set().union(*(r.paths for r in results.values()))
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
        cut=sum(r.counts.cut for r in results.values()),
    )


def _collect(
    processes: list[Any],
    messages: multiprocessing.Queue[tuple[str, int, Any]],
    end: float | None,
    progress: Callable[[FuzzProgress], None] | None,
    started: float,
) -> dict[int, _Result]:
    """Start the workers and gather what each did; stop them all on the way out, however it
    is taken. A worker still silent :data:`_GRACE_S` after the time limit is stopped and its
    last progress report stands, its example in progress counted as cut."""
    jobs = len(processes)
    counts: dict[int, _Counts] = {}
    paths: dict[int, set[int]] = {job: set() for job in range(jobs)}
    results: dict[int, _Result] = {}
    try:
        with _ctrl_c_held():  # inherited by the new processes from their start
            for process in processes:
                process.start()
        while len(results) < jobs:
            if end is not None and time.time() > end + _GRACE_S:
                for job in set(range(jobs)) - set(results):
                    processes[job].terminate()
                    last = counts.get(job, _Counts(0, 0, 0.0))
                    done = _Counts(last.examples, last.invariants, last.slowest_s, last.cut + 1)
                    results[job] = _Result(done, paths[job], None, None)
                break
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
                paths[job] |= new_paths
            else:
                results[job] = payload
                counts[job] = payload.counts
                paths[job] |= payload.paths
            if progress is not None:
                seen = len(set().union(*paths.values()))
                progress(_progress(counts, seen, time.perf_counter() - started))
    finally:
        for process in processes:
            if process.pid is None:  # never started: starting an earlier one failed
                continue
            if process.is_alive() and len(results) < jobs:
                process.terminate()
            process.join(_GRACE_S)
            if process.is_alive():  # stuck on its way out (a thread of user code that stays)
                process.kill()
                process.join()
    return results


def _progress(counts: dict[int, _Counts], paths: int, elapsed_s: float) -> FuzzProgress:
    return FuzzProgress(
        sum(c.examples for c in counts.values()),
        paths,
        sum(c.invariants for c in counts.values()),
        elapsed_s,
        max(c.slowest_s for c in counts.values()),
    )
