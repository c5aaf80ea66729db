"""``fsm-agent inspect`` as an operator starts it: one-line start-up errors, the address shown
only once it listens, a warning off loopback, no short tokens, the store from the environment,
and a missing extra reported as for every command."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from fsm_agent.persistence import SQLiteCheckpointer

pytest.importorskip("uvicorn")


@pytest.fixture
def store_path(tmp_path: Path) -> str:
    """An empty SQLite checkpoint store."""
    path = tmp_path / "runs.db"
    SQLiteCheckpointer(path).close()
    return str(path)


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fsm_agent", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, **(env or {})},
    )


def _one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    """The single stderr line of a failure with exit code 2; no address was announced."""
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert lines[0].startswith("fsm-agent inspect: error: "), lines[0]
    assert "http://" not in result.stderr and "Traceback" not in result.stderr
    return lines[0]


def test_a_port_in_use_is_one_line(store_path: str) -> None:
    """Another process on the port: one line naming the address and why, exit 2, and no
    address of the other process announced."""
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        line = _one_error_line(_run("inspect", store_path, "--port", str(port)))
    assert line.endswith(f"cannot listen on 127.0.0.1:{port}: Address already in use"), line


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--port", "99999"], "argument --port: must be a port from 0 to 65535, not 99999"),
        (["--host", "no-such-host.invalid", "--port", "0"], "cannot listen on no-such-host"),
        (["--token", "a"], "must be at least 16 characters"),
    ],
    ids=["port out of range", "unknown host", "short token"],
)
def test_bad_start_up_input_is_one_line(store_path: str, args: list[str], said: str) -> None:
    """A port out of range, a host that does not resolve, a token too short: one line each,
    exit 2, nothing served."""
    assert said in _one_error_line(_run("inspect", store_path, *args))


def test_a_short_token_is_refused_with_a_way_to_make_one(store_path: str) -> None:
    """``--token a`` says the minimum and how to generate a good token."""
    line = _one_error_line(_run("inspect", store_path, "--token", "a" * 15))
    assert "at least 16 characters" in line and "secrets.token_urlsafe" in line


@pytest.fixture
def serving() -> Iterator[Callable[..., tuple[subprocess.Popen[str], list[str]]]]:
    """Starts ``fsm-agent inspect ARGS`` and reads stderr up to the announced address; stops
    every process it started when the test ends."""
    started: list[subprocess.Popen[str]] = []

    def start(*args: str, env: dict[str, str]) -> tuple[subprocess.Popen[str], list[str]]:
        process = subprocess.Popen(
            [sys.executable, "-m", "fsm_agent", "inspect", *args],
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **env},
        )
        started.append(process)
        assert process.stderr is not None
        lines: list[str] = []
        while not lines or "http://" not in lines[-1]:
            line = process.stderr.readline()  # the process ends (EOF) if it cannot start
            assert line, f"ended without announcing an address: {lines}"
            lines.append(line.rstrip("\n"))
        return process, lines

    yield start
    for process in started:
        process.kill()
        process.communicate()


def test_the_address_is_announced_once_it_listens_and_the_store_may_come_from_the_environment(
    store_path: str, serving: Callable[..., tuple[subprocess.Popen[str], list[str]]]
) -> None:
    """With the store in ``FSM_AGENT_STORE`` (out of the process list) and ``--port 0``, the
    one line announced names the port picked, and it answers at once: the address is shown
    only once it listens. On loopback there is no warning."""
    process, lines = serving("--port", "0", env={"FSM_AGENT_STORE": store_path})
    assert store_path not in " ".join(process.args)
    assert len(lines) == 1, lines
    found = re.search(r"http://127\.0\.0\.1:(\d+)/#token=(\S+)", lines[0])
    assert found is not None, lines
    answer = httpx.get(
        f"http://127.0.0.1:{found[1]}/api/runs", headers={"Authorization": f"Bearer {found[2]}"}
    )
    assert answer.status_code == 200 and answer.json()["runs"] == []


def test_a_host_off_loopback_is_warned_about(
    store_path: str, serving: Callable[..., tuple[subprocess.Popen[str], list[str]]]
) -> None:
    """``--host 0.0.0.0``: a warning on stderr that the page is served over plain HTTP,
    before the address."""
    _, lines = serving(store_path, "--host", "0.0.0.0", "--port", "0", env={})
    assert len(lines) == 2, lines
    assert lines[0].startswith("fsm-agent inspect: warning: serving on 0.0.0.0 over plain HTTP")


def test_no_store_at_all_is_a_usage_error() -> None:
    """Neither ``--store`` nor ``FSM_AGENT_STORE``: one line naming both ways to give one."""
    result = _run("inspect", env={"FSM_AGENT_STORE": ""})
    line = _one_error_line(result)
    assert "pass --store PATH_OR_DSN or set the environment variable FSM_AGENT_STORE" in line


_WITHOUT = "import sys; sys.modules[{module!r}] = None; from fsm_agent.cli import main; "
_WITHOUT += "sys.exit(main({argv!r}))"


@pytest.mark.parametrize(
    ("module", "argv"),
    [
        ("uvicorn", ["inspect", "STORE"]),
        ("psycopg", ["runs", "list", "--db", "postgresql://u@127.0.0.1:1/x"]),
    ],
    ids=["inspect without uvicorn", "runs without psycopg"],
)
def test_a_missing_extra_exits_1_for_every_command(
    store_path: str, module: str, argv: list[str]
) -> None:
    """A missing optional dependency is exit code 1 with one line naming the extra, for
    ``inspect`` as for ``runs`` (docs/cli.md)."""
    argv = [store_path if a == "STORE" else a for a in argv]
    code = _WITHOUT.format(module=module, argv=argv)
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 1 and len(lines) == 1, result.stderr
    assert "pip install" in lines[0] or "extra" in lines[0], lines[0]
