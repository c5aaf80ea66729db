"""The package as it ships: its licence and metadata, an sdist whose tests run, a message naming
the extra for every optional dependency, and an import that loads only what it needs."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tarfile
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def python(code: str, *, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter with this checkout importable."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_licence_file_is_the_mit_licence_the_metadata_names() -> None:
    """LICENSE holds the MIT licence of the fsm_agent developers, as pyproject declares, and the
    project lists where its repository, docs and issues are."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert project["license"] == "MIT" and text.startswith("MIT License")
    assert "fsm_agent developers" in text and project["authors"] == [
        {"name": "fsm_agent developers"}
    ]
    assert {"Repository", "Documentation", "Issues"} <= set(project["urls"])


@pytest.mark.slow  # builds an sdist, then collects its whole suite in a fresh interpreter
def test_the_sdist_ships_everything_its_tests_import(tmp_path: Path) -> None:
    """The sdist holds the licence and whatever the tests import (benchmarks/workload.py): its
    test suite is collected with no error."""
    pytest.importorskip("hatchling", reason="the build backend comes with the [dev] extra")
    build = subprocess.run(
        [sys.executable, "-m", "hatchling", "build", "-t", "sdist", "-d", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert build.returncode == 0, build.stderr
    (archive,) = tmp_path.glob("fsm_agent-*.tar.gz")
    with tarfile.open(archive) as tar:
        tar.extractall(tmp_path, filter="data")
    (tree,) = (p for p in tmp_path.iterdir() if p.is_dir())
    assert (tree / "LICENSE").is_file() and (tree / "benchmarks" / "workload.py").is_file()
    collect = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"],
        cwd=tree,
        env={**os.environ, "PYTHONPATH": str(tree)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert collect.returncode == 0, collect.stdout[-2000:]
    summary = collect.stdout.strip().splitlines()[-1]
    assert re.fullmatch(r"\d+ tests collected in [\d.]+s", summary), summary


# --- optional dependencies ----------------------------------------------------------------

_MISSING = {
    "dbos": ("dbos", ["dbos"], "import fsm_agent.durable"),
    "hypothesis: fuzz_agent": (
        "testing",
        ["hypothesis"],
        "from fsm_agent.testing import fuzz_agent; fuzz_agent(lambda model: None)",
    ),
    "hypothesis: strategies": ("testing", ["hypothesis"], "from fsm_agent.testing import cases"),
    "psycopg": (
        "postgres",
        ["psycopg"],
        "from fsm_agent.persistence import PostgresCheckpointer\n"
        "PostgresCheckpointer('postgresql://127.0.0.1/test')",
    ),
    "graphviz": (
        "diagrams",
        ["pygraphviz", "graphviz"],
        "from fsm_agent.diagrams import render; render('digraph { a }')",
    ),
}


@pytest.mark.parametrize("case", sorted(_MISSING))
def test_a_missing_extra_names_itself_and_how_to_install_it(case: str) -> None:
    """Without an optional dependency, using what needs it raises a fsm_agent error (still an
    ImportError where it is an import) whose message names the extra and the command that
    installs it from a checkout; never a bare ModuleNotFoundError."""
    extra, modules, use = _MISSING[case]
    blocked = "".join(f"sys.modules[{name!r}] = None\n" for name in modules)
    code = (
        "import sys\n"
        f"{blocked}"
        "from fsm_agent.errors import FsmAgentError\n"
        "try:\n"
        + "".join(f"    {line}\n" for line in use.splitlines())
        + "except FsmAgentError as exc:\n"
        "    print(type(exc).__name__, isinstance(exc, ImportError), exc, sep='|')\n"
    )
    result = python(code)
    assert result.returncode == 0, result.stderr
    kind, is_import_error, message = result.stdout.strip().split("|")
    assert f"pip install -e '.[{extra}]'" in message
    if extra == "diagrams":
        assert kind == "RenderingUnavailableError"
    else:
        assert kind == "MissingExtraError" and is_import_error == "True"
        assert f"[{extra}] extra" in message


# --- start-up -------------------------------------------------------------------------------

_LOADED_ON_USE = (
    "dbos",
    "graphviz",
    "httpx",
    "hypothesis",
    "psycopg",
    "pygraphviz",
    "sqlite3",
    "fsm_agent.diagrams",
    "fsm_agent.durable",
    "fsm_agent.fuzzing",
    "fsm_agent.machine.checker",
    "fsm_agent.persistence.postgres",
    "fsm_agent.persistence.sqlite",
    "fsm_agent.providers",
)


def test_importing_fsm_agent_loads_no_provider_database_or_extra() -> None:
    """``import fsm_agent`` loads no provider, HTTP client, database driver, hypothesis, DBOS or
    Graphviz module; each loads when first used (here: the providers and SQLite)."""
    code = (
        "import sys, fsm_agent\n"
        f"names = {_LOADED_ON_USE!r}\n"
        "print(sorted(n for n in names if n in sys.modules))\n"
        "fsm_agent.infer_model\n"
        "fsm_agent.SQLiteCheckpointer\n"
        "print(sorted(n for n in names if n in sys.modules))\n"
    )
    result = python(code)
    assert result.returncode == 0, result.stderr
    before, after = result.stdout.splitlines()
    assert before == "[]"
    assert "fsm_agent.providers" in after and "fsm_agent.persistence.sqlite" in after


def test_a_built_agent_runs_without_building_a_validator() -> None:
    """Building an agent builds the validators its runs need, so that the first run of a
    service does not stop its event loop for milliseconds to build them (a durable agent: the
    run state's as well)."""
    code = (
        "import asyncio\n"
        "from pydantic._internal import _model_construction as construction\n"
        "from fsm_agent import Agent, InMemoryCheckpointer, tool\n"
        "from fsm_agent.testing import ScriptedModel, text, tool_call\n"
        "@tool\n"
        "def look(n: int) -> str:\n"
        "    'Look it up.'\n"
        "    return str(n)\n"
        "answers = [tool_call('look', {'n': 1}), text('done')]\n"
        "agent = Agent(ScriptedModel(answers), tools=[look], checkpointer=InMemoryCheckpointer())\n"
        "built = []\n"
        "complete = construction.complete_model_class\n"
        "def spy(cls, *args, **kwargs):\n"
        "    built.append(cls.__name__)\n"
        "    return complete(cls, *args, **kwargs)\n"
        "construction.complete_model_class = spy\n"
        "result = asyncio.run(agent.run('go'))\n"
        "print(result.output, built)\n"
    )
    result = python(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["done", "[]"]


def test_importing_fsm_agent_builds_no_pydantic_validator() -> None:
    """``import fsm_agent`` and the kernel it loads on first use (``fsm_agent.Agent``) build no
    pydantic validator: each model's is built when the model is first validated, each record
    type's adapter when first used (pydantic's scan of the installed distributions for plugins,
    with ``importlib.metadata``, waits as well), and every model and record type still builds."""
    code = (
        "import dataclasses, sys, pydantic, fsm_agent\n"
        "fsm_agent.Agent\n"
        "from fsm_agent.events import event_adapter\n"
        "from fsm_agent.messages import parse_arguments\n"
        "from fsm_agent import record\n"
        "types = [v for name, m in sorted(sys.modules.items()) if name.startswith('fsm_agent.')"
        " for v in vars(m).values() if isinstance(v, type) and v.__module__ == name]\n"
        "models = [v for v in types if issubclass(v, pydantic.BaseModel)]\n"
        "records = [v for v in types"
        " if issubclass(v, record.Record) and dataclasses.is_dataclass(v)]\n"
        "print(len(models) + len(records), [m.__name__ for m in models if m.__pydantic_complete__]"
        " + [str(t) for t in record._ADAPTERS])\n"
        "print(event_adapter.pydantic_complete, 'importlib.metadata' in sys.modules)\n"
        "print(fsm_agent.Policy(max_steps=3).max_steps, parse_arguments('{\"a\": [1]}'))\n"
        "event_adapter.rebuild()\n"
        "for model in models:\n"
        "    model.model_rebuild()\n"
        "built = [record.adapter(r).core_schema for r in records]\n"
        "print(all(m.__pydantic_complete__ for m in models), event_adapter.pydantic_complete)\n"
    )
    result = python(code)
    assert result.returncode == 0, result.stderr
    built, adapter, used, rebuilt = result.stdout.splitlines()
    count, names = built.split(" ", 1)
    assert int(count) > 40 and names == "[]"
    assert adapter == "False False"
    assert used == "3 {'a': [1]}"
    assert rebuilt == "True True"
