"""What ``import fsm_agent`` loads: the errors only; every other public name loads with its
module on first use, and the command line imports a command's module when that command runs.

Each check runs in a fresh interpreter (this one has imported everything already). The start-up
times these imports buy are measured by ``benchmarks/startup.py``, never by a timed test.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from importlib import import_module
from pathlib import Path

import fsm_agent
import fsm_agent.diagrams
import fsm_agent.testing
from fsm_agent._lazy import type_checking_imports

ROOT = Path(fsm_agent.__file__).parents[1]

# Heavy or optional modules that ``import fsm_agent`` must not load.
_NOT_AT_IMPORT = (
    "asyncio",
    "fsm_agent.diagrams",
    "fsm_agent.fuzzing",
    "fsm_agent.kernel",
    "fsm_agent.machine",
    "fsm_agent.messages",
    "fsm_agent.persistence",
    "fsm_agent.providers",
    "httpx",
    "importlib.metadata",
    "pydantic",
    "pydantic_core",
    "sqlite3",
    "transitions",
)


def _loaded_after(code: str) -> dict[str, object]:
    """Run ``code`` in a fresh interpreter; what it leaves in ``result`` (JSON) plus the
    modules it loaded."""
    program = (
        "import json, sys\n"
        "result = {}\n"
        f"{code}\n"
        "result['modules'] = sorted(sys.modules)\n"
        "print(json.dumps(result))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, check=True, cwd=ROOT
    )
    found: dict[str, object] = json.loads(out.stdout.splitlines()[-1])
    return found


def _modules(found: dict[str, object]) -> set[str]:
    modules = found["modules"]
    assert isinstance(modules, list)
    return set(modules)


def test_import_fsm_agent_loads_only_the_errors() -> None:
    """``import fsm_agent`` loads no fsm_agent module but the package, its errors and its
    loader, and none of the heavy dependencies (pydantic, transitions, httpx, asyncio,
    sqlite3)."""
    modules = _modules(_loaded_after("import fsm_agent"))
    assert sorted(m for m in modules if m.startswith("fsm_agent")) == [
        "fsm_agent",
        "fsm_agent._lazy",
        "fsm_agent.errors",
    ]
    assert sorted(m for m in _NOT_AT_IMPORT if m in modules) == []


def test_every_public_name_resolves_to_its_home_object() -> None:
    """Each lazy name of ``__all__`` reads as the object its module defines (the module the
    ``if TYPE_CHECKING:`` imports give), and ``from fsm_agent import *`` binds them all."""
    for name, where in type_checking_imports(str(fsm_agent.__file__)).items():
        assert getattr(fsm_agent, name) is getattr(import_module(where, "fsm_agent"), name), name
    found = _loaded_after(
        "from fsm_agent import *\n"
        "import fsm_agent\n"
        "result['bound'] = sorted(n for n in fsm_agent.__all__ if n in globals())\n"
    )
    assert found["bound"] == sorted(fsm_agent.__all__)


def test_the_table_the_type_imports_and_all_name_the_same_names() -> None:
    """The names ``__all__`` exports are exactly the errors bound at import and the names the
    ``if TYPE_CHECKING:`` imports bring (what mypy, IDEs and the loader read), each from a
    module of the package."""
    tree = ast.parse(Path(fsm_agent.__file__).read_text(encoding="utf-8"))
    typed: dict[str, str] = {}
    eager: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for imported in node.body:
                assert isinstance(imported, ast.ImportFrom) and imported.level == 1
                typed.update({a.name: str(imported.module) for a in imported.names})
        elif isinstance(node, ast.ImportFrom) and node.module == "errors":
            eager.update(a.name for a in node.names)
    assert {n: f".{m}" for n, m in typed.items()} == type_checking_imports(str(fsm_agent.__file__))
    assert eager.isdisjoint(typed)
    assert sorted(eager | set(typed)) == sorted(fsm_agent.__all__)


def test_the_testing_facade_names_each_name_once_where_it_lives() -> None:
    """``fsm_agent.testing``'s ``if TYPE_CHECKING:`` imports and ``__all__`` name the same
    names, each read as the object its module defines; ``dir`` lists them before any has
    loaded, and a submodule's name imports the submodule."""
    testing = fsm_agent.testing
    typed = type_checking_imports(str(testing.__file__))
    assert sorted(typed) == sorted(testing.__all__)
    for name, module in typed.items():
        home = import_module(module, testing.__name__)
        assert getattr(testing, name) is getattr(home, name), name
    found = _loaded_after(
        "import fsm_agent.testing as testing\n"
        "result['missing'] = sorted(set(testing.__all__) - set(dir(testing)))\n"
        "result['crash'] = testing.crash.SimulatedCrash.__name__\n"
    )
    assert found["missing"] == [] and found["crash"] == "SimulatedCrash"


def test_dir_lists_the_public_names_before_they_load() -> None:
    """``dir(fsm_agent)`` lists every public name (and ``__version__``) in a fresh process,
    before any has been read."""
    found = _loaded_after(
        "import fsm_agent\n"
        "names = dir(fsm_agent)\n"
        "result['missing'] = sorted(set(fsm_agent.__all__) - set(names))\n"
        "result['version'] = '__version__' in names\n"
        "result['sorted'] = names == sorted(names)\n"
    )
    assert found["missing"] == []
    assert found["version"] is True and found["sorted"] is True


def test_an_unknown_name_is_the_usual_attribute_error() -> None:
    """Reading a name the package does not have raises ``AttributeError`` with Python's own
    message, and ``hasattr`` is false; nothing is imported for it."""
    found = _loaded_after(
        "import fsm_agent\n"
        "try:\n"
        "    fsm_agent.NoSuchName\n"
        "except AttributeError as exc:\n"
        "    result['message'] = str(exc)\n"
        "result['hasattr'] = hasattr(fsm_agent, 'also_missing')\n"
    )
    assert found["message"] == "module 'fsm_agent' has no attribute 'NoSuchName'"
    assert found["hasattr"] is False
    assert "fsm_agent.kernel" not in _modules(found)


def test_a_submodule_read_as_an_attribute_is_imported() -> None:
    """``fsm_agent.policy.Policy`` after ``import fsm_agent`` works as it did when the import
    loaded the kernel: a submodule's name imports the submodule."""
    found = _loaded_after(
        "import fsm_agent\n"
        "result['policy'] = fsm_agent.policy.Policy(max_steps=3).max_steps\n"
        "result['same'] = fsm_agent.policy.Policy is fsm_agent.Policy\n"
    )
    assert found["policy"] == 3 and found["same"] is True


def test_reprs_read_fsm_agent_names_whichever_name_is_read_first() -> None:
    """Reading one public name binds the names of every module already imported: the kernel
    imported directly, then any name read, ``Agent`` reads ``fsm_agent.Agent``. The errors read
    ``fsm_agent.<Error>`` without any name read; pydantic-validated types keep their module."""
    found = _loaded_after(
        "import fsm_agent\n"
        "from fsm_agent.errors import RateLimitError\n"
        "result['error'] = RateLimitError.__module__\n"
        "from fsm_agent.kernel.agent import Agent\n"
        "fsm_agent.Usage\n"
        "result['agent'] = Agent.__module__\n"
        "result['policy'] = fsm_agent.Policy.__module__\n"
    )
    assert (found["error"], found["agent"]) == ("fsm_agent", "fsm_agent")
    assert found["policy"] == "fsm_agent.policy"


def test_diagrams_loads_its_drawings_on_first_use() -> None:
    """``fsm_agent.diagrams`` loads the drawings on first use; ``render`` stays the function
    even when its submodule was imported by name first."""
    found = _loaded_after(
        "import fsm_agent.diagrams.render\n"
        "import fsm_agent.diagrams as diagrams\n"
        "result['render'] = callable(diagrams.render) and not hasattr(diagrams.render, 'render')\n"
        "result['early'] = sorted(m for m in sys.modules if m.startswith('fsm_agent.diagrams.'))\n"
        "result['plan'] = diagrams.plan.__module__\n"
    )
    assert found["render"] is True
    assert found["early"] == ["fsm_agent.diagrams.render"]
    assert found["plan"] == "fsm_agent.diagrams.text"
    assert set(fsm_agent.diagrams.__all__) <= set(dir(fsm_agent.diagrams))


def _cli(*argv: str) -> set[str]:
    """The modules ``fsm-agent ARGV`` loads, run in a fresh process (its output discarded)."""
    found = _loaded_after(
        "import contextlib, io\n"
        "from fsm_agent.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    try:\n"
        f"        result['code'] = main({list(argv)!r})\n"
        "    except SystemExit as exc:\n"
        "        result['code'] = exc.code\n"
    )
    assert found["code"] == 0
    return _modules(found)


def test_help_and_version_load_no_command() -> None:
    """``fsm-agent --help`` and ``--version`` import no command module, no kernel and no
    pydantic."""
    for argv in (["--help"], ["--version"]):
        modules = _cli(*argv)
        assert sorted(m for m in modules if m.startswith("fsm_agent")) == [
            "fsm_agent",
            "fsm_agent._lazy",
            "fsm_agent.cli",
            "fsm_agent.cli.args",
            "fsm_agent.errors",
        ], argv
        assert "pydantic" not in modules and "transitions" not in modules


def test_the_agent_loads_what_a_run_uses() -> None:
    """``from fsm_agent import Agent`` imports neither ``transitions`` (a run takes the compiled
    lookup; the machine's definition is built on first use), nor pydantic's model machinery
    (``pydantic`` itself: the policy and the value types name pydantic's metadata without it,
    and their validators are built on first use), nor what only some programs use: the
    operations on stored runs (fork, abandon), agents as tools and the bounds' analysis."""
    modules = _modules(_loaded_after("from fsm_agent import Agent"))
    assert "fsm_agent.kernel.driver" in modules
    unneeded = (
        "fsm_agent.analysis.bounds",
        "fsm_agent.kernel.abandon",
        "fsm_agent.kernel.composition",
        "fsm_agent.kernel.fork",
        "pydantic",
        "pydantic.main",
        "pydantic.type_adapter",
        "transitions",
    )
    assert sorted(m for m in unneeded if m in modules) == []


def test_the_demo_loads_only_what_it_runs() -> None:
    """``fsm-agent demo --no-diagram`` runs the kernel on a scripted model: it imports no other
    command, no provider, no HTTP client, no store, no recorder and no fuzzer."""
    modules = _cli("demo", "--no-diagram")
    assert "fsm_agent.kernel.agent" in modules
    unneeded = (
        "fsm_agent.cli.check",
        "fsm_agent.cli.fuzz",
        "fsm_agent.cli.inspect",
        "fsm_agent.cli.run",
        "fsm_agent.fuzzing",
        "fsm_agent.persistence.sqlite",
        "fsm_agent.providers",
        "fsm_agent.replay",
        "httpx",
        "hypothesis",
        "sqlite3",
    )
    assert sorted(m for m in unneeded if m in modules) == []


def test_the_persistence_facade_loads_a_store_on_first_use() -> None:
    """``import fsm_agent.persistence`` loads neither SQL store and ``dir`` lists both; reading
    ``SQLiteCheckpointer`` loads its module and gives its class."""
    found = _loaded_after(
        "import sys\n"
        "import fsm_agent.persistence as persistence\n"
        "stores = ('fsm_agent.persistence.sqlite', 'fsm_agent.persistence.postgres')\n"
        "result['before'] = sorted(m for m in stores if m in sys.modules)\n"
        "result['listed'] = 'PostgresCheckpointer' in dir(persistence)\n"
        "from fsm_agent.persistence.sqlite import SQLiteCheckpointer\n"
        "result['same'] = persistence.SQLiteCheckpointer is SQLiteCheckpointer\n"
    )
    assert found["before"] == [] and found["listed"] is True and found["same"] is True
