"""``fsm-agent fuzz`` as an operator runs it: as a process of its own, stopped by Ctrl-C,
SIGTERM or SIGKILL, or by its time limit. Each test waits for conditions (workers started,
workers gone) with generous bounds, and kills whatever it started on its way out."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from fsm_agent.fuzzing import fuzz
from fsm_agent.fuzzing.jobs import fuzz_in_processes
from slow_agents import many_retries_agent, slow_model_agent

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="reads processes from /proc")

BOUND_S = 60.0
"""The longest any condition is waited for: far longer than it takes on a loaded machine."""
SUPPORT = Path(__file__).resolve().parents[1] / "support"


def wait_for(condition: Callable[[], bool], what: str, bound_s: float = BOUND_S) -> None:
    """Poll ``condition`` until it holds; fail naming ``what`` after ``bound_s`` seconds."""
    deadline = time.monotonic() + bound_s
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"not within {bound_s:.0f} s: {what}")
        time.sleep(0.05)


def _stat(pid: int) -> list[str] | None:
    """The fields of ``/proc/PID/stat`` after the command name; ``None``: no such process."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2 :].split()


def alive(pid: int) -> bool:
    """``pid`` is a process that still runs (a zombie waiting to be reaped has ended)."""
    fields = _stat(pid)
    return fields is not None and fields[0] != "Z"


def workers_of(parent: int) -> list[int]:
    """The fuzz worker processes ``parent`` started (multiprocessing's spawned children, not
    its resource tracker)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        fields = _stat(int(entry.name))
        if fields is None or int(fields[1]) != parent or fields[0] == "Z":
            continue
        try:
            command = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if b"spawn_main" in command:
            found.append(int(entry.name))
    return found


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.fixture
def start() -> Iterator[Callable[..., subprocess.Popen[str]]]:
    """Starts ``python -m fsm_agent ARGS`` in a session of its own (importing the tests'
    modules) with Ctrl-C's default action (a suite started in the background of a shell
    without job control ignores SIGINT, and so would the command, as Unix wants); kills the
    whole session when the test ends, whatever happened."""
    started: list[subprocess.Popen[str]] = []

    def run(*args: str) -> subprocess.Popen[str]:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SUPPORT), *sys.path])}
        process = subprocess.Popen(
            [sys.executable, "-m", "fsm_agent", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
            env=env,
            preexec_fn=_default_sigint,
        )
        started.append(process)
        return process

    yield run
    for process in started:
        with contextlib.suppress(ProcessLookupError):  # its group: it and its workers
            os.killpg(process.pid, signal.SIGKILL)
        process.communicate()


def _two_workers(process: subprocess.Popen[str]) -> list[int]:
    workers: list[int] = []

    def found() -> bool:
        workers[:] = workers_of(process.pid)
        return len(workers) == 2 or process.poll() is not None

    wait_for(found, "fuzz --jobs 2 starts two workers")
    assert process.poll() is None, process.communicate()
    return workers


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_workers_die_with_their_parent(
    start: Callable[..., subprocess.Popen[str]], how: signal.Signals
) -> None:
    """Killing ``fuzz --jobs 2`` (SIGKILL, or SIGTERM) ends its two workers too: none keeps
    fuzzing for a parent that is gone."""
    process = start("fuzz", "--jobs", "2", "--examples", "1000000", "--seed", "0")
    workers = _two_workers(process)
    os.kill(process.pid, how)
    process.communicate(timeout=BOUND_S)
    assert process.returncode == -how
    wait_for(lambda: not any(alive(pid) for pid in workers), "the workers end with the parent")


def test_ctrl_c_stops_a_split_session_in_one_line(
    start: Callable[..., subprocess.Popen[str]],
) -> None:
    """Ctrl-C (SIGINT to the whole process group, as a terminal sends it) during
    ``fuzz --jobs 2`` ends with the one line "interrupted" and exit code 130: the worker
    processes print no traceback, and end."""
    process = start("fuzz", "--jobs", "2", "--examples", "1000000")
    workers = _two_workers(process)
    # A progress line comes from the parent's loop, once the workers have started and ignore
    # Ctrl-C themselves (a Ctrl-C during their start: the test below).
    assert process.stderr is not None
    ready, _, _ = select.select([process.stderr], [], [], BOUND_S)
    assert ready and process.stderr.readline().startswith("fuzz: "), "no progress line"
    os.killpg(process.pid, signal.SIGINT)
    _, err = process.communicate(timeout=BOUND_S)
    assert process.returncode == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert err.splitlines()[-1] == "fsm-agent fuzz: interrupted", err
    wait_for(lambda: not any(alive(pid) for pid in workers), "the workers end")


CTRL_C_DURING_START = """
import multiprocessing, os, signal
from fsm_agent.fuzzing.jobs import fuzz_in_processes

started = []
spawn = multiprocessing.get_context("spawn").Process
real_start = spawn.start

def start_then_ctrl_c(self):
    real_start(self)
    started.append(self)
    if len(started) == 1:  # between the first worker's start and the second's
        os.kill(os.getpid(), signal.SIGINT)

spawn.start = start_then_ctrl_c
try:
    fuzz_in_processes(None, jobs=2, examples=1_000_000, seed=0, max_seconds=3)
except KeyboardInterrupt:
    print("interrupted", len(started), all(p.exitcode is not None for p in started))
else:
    print("ran on", len(started))
"""


def test_ctrl_c_while_the_workers_start_is_not_lost() -> None:
    """A Ctrl-C that arrives while the workers are being started stops the session once they
    are (it was ignored, and the session ran on): the started workers end, none is left. In a
    process of its own, whose main thread handles signals as a command's does."""
    done = subprocess.run(
        [sys.executable, "-c", CTRL_C_DURING_START],
        capture_output=True,
        text=True,
        timeout=BOUND_S,
        check=False,
    )
    assert done.stdout.split() == ["interrupted", "2", "True"], done.stdout + done.stderr


def test_the_time_limit_cuts_an_example_that_would_run_for_minutes() -> None:
    """``max_seconds=1`` with a model that answers after ten minutes: the session ends at its
    limit, the example in progress counted as cut, neither passed nor failed, and the report
    is not OK (no example finished)."""
    began = time.monotonic()
    report = fuzz(slow_model_agent, examples=50, seed=0, max_seconds=1)
    assert time.monotonic() - began < BOUND_S
    assert (report.examples, report.cut, report.failure, report.ok) == (0, 1, None, False)
    text = report.format()
    assert text.startswith("fuzz: NO RESULT")
    assert "cut by the time limit: 1 example(s)" in text


def test_the_time_limit_holds_against_a_huge_retry_budget() -> None:
    """An agent with a retry budget of a million ends at ``max_seconds`` too: examples before
    the limit are checked, the one in progress is cut."""
    began = time.monotonic()
    report = fuzz(many_retries_agent, examples=100_000, seed=0, max_seconds=2)
    assert time.monotonic() - began < BOUND_S
    assert report.failure is None, report.format()
    assert report.cut == 1 and report.examples < 100_000


def test_the_time_limit_cuts_each_worker_of_a_split_session() -> None:
    """With ``jobs=2`` each worker cuts its slow example at the limit: none finished, at most
    one cut per worker (a worker that starts after the limit begins none), and the session
    ends long before the examples would."""
    began = time.monotonic()
    report = fuzz_in_processes(
        "slow_agents:slow_model_agent", jobs=2, examples=50, seed=0, max_seconds=3
    )
    assert time.monotonic() - began < BOUND_S
    assert (report.examples, report.ok) == (0, False)
    assert report.cut <= 2


def test_cli_time_limit_exit_code_with_no_example_finished(
    start: Callable[..., subprocess.Popen[str]],
) -> None:
    """``fsm-agent fuzz TARGET --max-seconds 1 --jobs 2`` on examples that never finish in
    time exits 1 with the report saying so, instead of running for minutes. The seed is
    pinned: some examples end before their first model call (seed 22's first does), and on a
    random seed such an example finished now and then, making the session a pass."""
    process = start(
        "fuzz", "slow_agents:slow_model_agent", "--max-seconds", "1", "--jobs", "2", "--seed", "0"
    )
    out, err = process.communicate(timeout=BOUND_S)
    assert process.returncode == 1, err
    assert out.startswith("fuzz: NO RESULT"), out
    assert "no example finished within the time limit" in out
