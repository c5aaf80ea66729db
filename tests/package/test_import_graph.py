"""The package's import graph points one way: down the layers of :data:`LAYERS`, with no cycle.

The graph: every import a module under ``fsm_agent/`` makes, read with ``ast`` (at module level
and deferred inside functions alike: a deferred import that closes a cycle only hides it), plus
the parent packages each import loads (importing ``fsm_agent.kernel.context`` runs
``fsm_agent/kernel/__init__.py`` first), except the lazy facades of :data:`FACADES`. Imports
under ``if TYPE_CHECKING:`` count for cycles and layers alike, everywhere (a type a module names
from another is still a dependency on it: a circle a type checker sees is a circle a reader
sees). The root package is left out as a target: every module loads it first, and it sits
above every layer. Inside the kernel, :data:`KERNEL_LAYERS` orders the modules the same way.

A facade is a package whose ``__init__`` imports a public name's module only when the name is
first read (PEP 562), so importing one of its submodules loads no other module for it: that import
does not count the facade, a name imported from the facade directly does. The rule holds while
a facade's ``__init__`` loads nothing above the lowest layer of its own submodules when it runs:
one test reads that from its imports, another watches a fresh interpreter import each facade.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from collections.abc import Collection, Iterable, Mapping
from pathlib import Path

import fsm_agent

PACKAGE = Path(fsm_agent.__file__).parent
ROOT = "fsm_agent"

FACADES = (ROOT, f"{ROOT}.testing")
"""The lazy facade packages: importing one of their submodules does not load their public names'
modules."""

LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("foundation", ("errors", "log", "redaction", "_genai_names", "_lazy")),
    ("values", ("values", "models")),
    ("machine", ("machine", "policy")),
    ("run state", ("run",)),
    ("phases", ("phases",)),
    ("seams", ("tools", "compaction", "providers")),
    ("analysis", ("analysis",)),
    ("diagrams", ("diagrams",)),
    ("persistence", ("persistence",)),
    ("kernel", ("kernel",)),
    ("on the kernel", ("hooks", "conversation", "observability", "durable", "replay")),
    ("checking", ("fuzzing", "testing")),
    ("applications", ("inspector", "cli", "__main__")),
)
"""The layers, lowest first, each with the modules and packages it holds (names under
``fsm_agent.``; a package holds all its submodules: a folder is one layer). A module may import
its own layer and the layers below it, never one above. docs/machine.md draws the same list."""

KERNEL_LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("run values", ("limits", "checks", "definition", "run")),
    ("plan", ("hooks", "handoffs", "plan")),
    ("run context", ("context",)),
    ("run parts", ("handover", "phasing", "progress", "listening", "sharing")),
    ("states", ("states",)),
    ("driver", ("driver",)),
    ("operations", ("resuming", "composition", "durable_child", "abandon", "fork")),
    ("agent", ("agent",)),
)
"""The kernel's own layers, lowest first (names under ``fsm_agent.kernel.``), read like
:data:`LAYERS`. docs/machine.md draws the same list."""


def modules(package: Path = PACKAGE) -> dict[str, Path]:
    """Every module of the package by its dotted name (a package by its own name)."""
    found: dict[str, Path] = {}
    for path in sorted(package.rglob("*.py")):
        parts = [ROOT, *path.relative_to(package).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _imports(
    body: Iterable[ast.stmt], type_only: bool, deferred: bool = True
) -> Iterable[ast.Import | ast.ImportFrom]:
    """The import statements of ``body``; those under ``if TYPE_CHECKING:`` only when
    ``type_only``, those inside a function only when ``deferred``."""
    for node in body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        elif isinstance(node, ast.If):
            if type_only or "TYPE_CHECKING" not in ast.unparse(node.test):
                yield from _imports(node.body, type_only, deferred)
            yield from _imports(node.orelse, type_only, deferred)
        elif isinstance(node, ast.Try):
            for block in (node.body, node.orelse, node.finalbody):
                yield from _imports(block, type_only, deferred)
            for handler in node.handlers:
                yield from _imports(handler.body, type_only, deferred)
        elif isinstance(node, ast.With | ast.For | ast.While | ast.ClassDef) or (
            deferred and isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        ):
            yield from _imports(node.body, type_only, deferred)


def imports_of(
    name: str,
    path: Path,
    known: Mapping[str, Path],
    *,
    type_only: bool = False,
    deferred: bool = True,
    facades: Collection[str] = FACADES,
) -> set[str]:
    """The package modules that importing ``name`` (at ``path``) imports directly; with
    ``type_only``, also those it names under ``if TYPE_CHECKING:``; without ``deferred``, only
    those it imports when it runs (none inside a function). An imported module's parent
    packages count too, except the ``facades``."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: set[str] = set()
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in _imports(tree.body, type_only, deferred):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
            continue
        base = node.module or ""
        if node.level:
            anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
            base = ".".join([*anchor, base] if base else anchor)
        for alias in node.names:
            submodule = f"{base}.{alias.name}"
            targets.add(submodule if submodule in known else base)
    loaded = set(targets)
    for target in targets:
        parts = target.split(".")
        parents = (".".join(parts[:end]) for end in range(2, len(parts)))
        loaded.update(parent for parent in parents if parent not in facades)
    own_packages = {p for p in known if name.startswith(p + ".")}
    return {t for t in loaded if t in known} - {name, ROOT} - own_packages


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            advanced = False
            for succ in successors:
                if succ not in index:
                    index[succ] = low[succ] = len(index)
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(sorted(graph.get(succ, ())))))
                    advanced = True
                    break
                if succ in on_stack:
                    low[node] = min(low[node], index[succ])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


KERNEL = f"{ROOT}.kernel"


def import_graph(known: Mapping[str, Path]) -> dict[str, set[str]]:
    """Every module's imports, type-only and deferred ones included."""
    return {name: imports_of(name, path, known, type_only=True) for name, path in known.items()}


def test_the_import_graph_has_no_cycle() -> None:
    """No circle of imports, counting those under ``if TYPE_CHECKING:``."""
    known = modules()
    graph = import_graph(known)
    assert sum(len(targets) for targets in graph.values()) > 100  # the graph was read
    assert graph["fsm_agent.kernel.driver"] >= {
        "fsm_agent.kernel.context",
        "fsm_agent.kernel.states",
        "fsm_agent.machine.table",
    }
    assert cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def _three_modules(tmp_path: Path) -> dict[str, Path]:
    """A package of three modules: ``low`` imports ``high`` for a type only and ``mid`` inside a
    function; ``high`` imports ``low``."""
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "low.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from .high import X\n"
        "def later():\n    from .mid import Y\n"
    )
    (package / "mid.py").write_text("Y = 1\n")
    (package / "high.py").write_text("from .low import later\nX = 1\n")
    return {f"{ROOT}.{name}": package / f"{name}.py" for name in ("low", "mid", "high")}


def test_type_checking_imports_are_left_out_and_deferred_ones_kept(tmp_path: Path) -> None:
    known = _three_modules(tmp_path)
    assert imports_of(f"{ROOT}.low", known[f"{ROOT}.low"], known) == {f"{ROOT}.mid"}
    assert imports_of(f"{ROOT}.high", known[f"{ROOT}.high"], known) == {f"{ROOT}.low"}


def test_a_type_only_import_that_closes_a_circle_is_found(tmp_path: Path) -> None:
    """The cycle rule reads type-only imports: ``low`` naming a type of ``high`` is a circle."""
    known = _three_modules(tmp_path)
    assert cycles(import_graph(known)) == [[f"{ROOT}.high", f"{ROOT}.low"]]


def kernel_upward_imports(known: Mapping[str, Path]) -> list[str]:
    """Every import inside the kernel, type-only and deferred ones included, of a module from a
    higher layer of :data:`KERNEL_LAYERS`."""
    inside = {
        n.removeprefix(ROOT + ".kernel."): p for n, p in known.items() if n.startswith(KERNEL + ".")
    }
    layers = tuple((name, tuple(f"kernel.{m}" for m in members)) for name, members in KERNEL_LAYERS)
    found = []
    for short, path in sorted(inside.items()):
        name = f"{KERNEL}.{short}"
        own = layer_of(name, layers)
        for target in sorted(imports_of(name, path, known, type_only=True)):
            if not target.startswith(KERNEL + "."):
                continue
            theirs = layer_of(target, layers)
            if theirs > own:
                found.append(f"{name} ({layers[own][0]}) imports {target} ({layers[theirs][0]})")
    return found


def test_every_kernel_import_points_down_its_layers() -> None:
    """No kernel module imports one from a higher kernel layer, not even for a type."""
    assert kernel_upward_imports(modules()) == []


def test_the_kernel_layers_find_an_upward_import(tmp_path: Path) -> None:
    """A type-only import of the driver by a state is against the kernel's layers."""
    kernel = tmp_path / "kernel"
    (kernel / "states").mkdir(parents=True)
    (kernel / "__init__.py").write_text("")
    (kernel / "states" / "__init__.py").write_text("")
    (kernel / "driver.py").write_text("from .states import idle\n")
    (kernel / "states" / "idle.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..driver import drive\n"
    )
    known = {
        KERNEL: kernel / "__init__.py",
        f"{KERNEL}.states": kernel / "states" / "__init__.py",
        f"{KERNEL}.driver": kernel / "driver.py",
        f"{KERNEL}.states.idle": kernel / "states" / "idle.py",
    }
    assert kernel_upward_imports(known) == [
        f"{KERNEL}.states.idle (states) imports {KERNEL}.driver (driver)"
    ]


def layer_of(name: str, layers: tuple[tuple[str, tuple[str, ...]], ...] = LAYERS) -> int:
    """The index in ``layers`` of module ``name``: the layer of the longest name that is the
    module or one of its packages (the root package sits above every layer)."""
    if name == ROOT:
        return len(layers)
    relative = name.removeprefix(ROOT + ".")
    best, found = -1, -1
    for index, (_, members) in enumerate(layers):
        for member in members:
            if (relative == member or relative.startswith(member + ".")) and len(member) > best:
                best, found = len(member), index
    assert found >= 0, f"{name} is in no layer: add it to LAYERS and to docs/machine.md"
    return found


def test_each_folder_is_one_layer() -> None:
    """No name of :data:`LAYERS` lies inside another: a package's modules share its layer."""
    members = [member for _, names in LAYERS for member in names]
    nested = [m for m in members for other in members if m.startswith(other + ".")]
    assert len(members) == len(set(members)) and nested == []


def upward_imports(
    known: Mapping[str, Path],
    layers: tuple[tuple[str, tuple[str, ...]], ...] = LAYERS,
    facades: Collection[str] = FACADES,
) -> list[str]:
    """Every import, type-only and deferred ones included, of a module from a higher layer."""
    found = []
    for name, path in sorted(known.items()):
        own = layer_of(name, layers)
        for target in sorted(imports_of(name, path, known, type_only=True, facades=facades)):
            theirs = layer_of(target, layers)
            if theirs > own:
                found.append(f"{name} ({layers[own][0]}) imports {target} ({layers[theirs][0]})")
    return found


def test_every_import_points_down_the_layers() -> None:
    """No module imports one from a higher layer, not even for a type or inside a function."""
    assert upward_imports(modules()) == []


def test_the_layers_find_an_upward_import(tmp_path: Path) -> None:
    """A type-only or deferred import from a higher layer is reported; one downward is not."""
    known = _three_modules(tmp_path)
    layers = (("bottom", ("low",)), ("middle", ("mid",)), ("top", ("high",)))
    assert upward_imports(known, layers) == [
        f"{ROOT}.low (bottom) imports {ROOT}.high (top)",
        f"{ROOT}.low (bottom) imports {ROOT}.mid (middle)",
    ]


def lowest_layer(
    facade: str,
    known: Mapping[str, Path],
    layers: tuple[tuple[str, tuple[str, ...]], ...] = LAYERS,
) -> int:
    """The lowest layer of the modules under package ``facade``."""
    return min(layer_of(name, layers) for name in known if name.startswith(facade + "."))


def eager_facade_imports(
    known: Mapping[str, Path],
    layers: tuple[tuple[str, tuple[str, ...]], ...] = LAYERS,
    facades: Collection[str] = FACADES,
) -> list[str]:
    """Every module a facade's ``__init__`` imports when it runs (not for a type, not inside a
    function) from above the lowest layer of the facade's own modules: importing one of those
    modules would load it, unseen by the graph, which does not count the facade."""
    found = []
    for facade in facades:
        floor = lowest_layer(facade, known, layers)
        for target in sorted(
            imports_of(facade, known[facade], known, deferred=False, facades=facades)
        ):
            theirs = layer_of(target, layers)
            if theirs > floor:
                found.append(
                    f"{facade} loads {target} ({layers[theirs][0]}), above its modules' lowest "
                    f"layer ({layers[floor][0]})"
                )
    return found


def _facade_package(tmp_path: Path, *, eager: bool) -> dict[str, Path]:
    """A package with a facade ``front`` (a module ``front.low``) whose names come from ``high``,
    eagerly or on first use; ``user`` imports ``front.low``, ``caller`` a name from ``front``."""
    package = tmp_path / "pkg"
    (package / "front").mkdir(parents=True)
    (package / "front" / "__init__.py").write_text(
        "from ..high import X\n"
        if eager
        else "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from ..high import X\n"
        "def __getattr__(name):\n    from .. import high\n    return getattr(high, name)\n"
    )
    (package / "front" / "low.py").write_text("Y = 1\n")
    (package / "high.py").write_text("X = 1\n")
    (package / "user.py").write_text("from .front.low import Y\n")
    (package / "caller.py").write_text("from .front import X\n")
    files = {"front": package / "front" / "__init__.py", "front.low": package / "front" / "low.py"}
    files |= {name: package / f"{name}.py" for name in ("high", "user", "caller")}
    return {f"{ROOT}.{name}": path for name, path in files.items()}


_FACADE_LAYERS = (("bottom", ("front.low", "user", "caller")), ("top", ("front", "high")))


def test_a_facade_counts_when_a_name_is_imported_from_it_not_a_module(tmp_path: Path) -> None:
    """Importing a facade's module does not count the facade; importing a name from it does
    (a package that is not a facade counts either way)."""
    known = _facade_package(tmp_path, eager=False)
    facades = (f"{ROOT}.front",)
    user, caller = f"{ROOT}.user", f"{ROOT}.caller"
    assert imports_of(user, known[user], known, facades=facades) == {f"{ROOT}.front.low"}
    assert imports_of(user, known[user], known, facades=()) == {
        f"{ROOT}.front",
        f"{ROOT}.front.low",
    }
    assert imports_of(caller, known[caller], known, facades=facades) == {f"{ROOT}.front"}
    assert upward_imports(known, _FACADE_LAYERS, facades) == [
        f"{ROOT}.caller (bottom) imports {ROOT}.front (top)"
    ]
    assert eager_facade_imports(known, _FACADE_LAYERS, facades) == []


def test_a_facade_that_imports_a_higher_module_eagerly_fails(tmp_path: Path) -> None:
    """A facade whose ``__init__`` imports a module above its own modules' lowest layer when it
    runs is reported: importing ``front.low`` would load ``high`` behind the graph's back."""
    known = _facade_package(tmp_path, eager=True)
    facades = (f"{ROOT}.front",)
    assert eager_facade_imports(known, _FACADE_LAYERS, facades) == [
        f"{ROOT}.front loads {ROOT}.high (top), above its modules' lowest layer (bottom)"
    ]


def test_every_facade_loads_nothing_above_its_lowest_modules_when_imported() -> None:
    """No facade's ``__init__`` imports a module above its own modules' lowest layer
    (``fsm_agent``: the errors and the loader; ``fsm_agent.testing``: the loader)."""
    assert eager_facade_imports(modules()) == []


def test_importing_a_facade_loads_nothing_above_its_lowest_modules() -> None:
    """In a fresh interpreter, importing a facade and its modules of the lowest layer loads no
    package module above that layer and no hypothesis."""
    known = modules()
    for facade in FACADES:
        floor = lowest_layer(facade, known)
        lowest = sorted(n for n in known if n.startswith(facade + ".") and layer_of(n) == floor)
        program = "\n".join(
            [
                "import json, sys",
                *(f"import {name}" for name in [facade, *lowest]),
                "print(json.dumps(sorted(sys.modules)))",
            ]
        )
        out = subprocess.run(
            [sys.executable, "-c", program],
            capture_output=True,
            text=True,
            check=True,
            cwd=PACKAGE.parent,
        )
        loaded = set(json.loads(out.stdout))
        own = {".".join(facade.split(".")[:end]) for end in range(1, facade.count(".") + 2)}
        above = sorted(
            f"{name} ({LAYERS[layer_of(name)][0]})"
            for name in loaded
            if name.split(".")[0] == ROOT and name not in own and layer_of(name) > floor
        )
        assert lowest and above == [], (facade, above)


def test_importing_a_facade_alone_loads_none_of_its_names() -> None:
    """In a fresh interpreter, importing every facade loads no module of the package but the
    facades, the errors and the loader, and no hypothesis or pydantic."""
    program = "\n".join(
        [
            "import json, sys",
            *(f"import {facade}" for facade in FACADES),
            "print(json.dumps(sorted(sys.modules)))",
        ]
    )
    out = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, check=True
    )
    loaded = set(json.loads(out.stdout))
    ours = {name for name in loaded if name.split(".")[0] == ROOT}
    assert ours == {*FACADES, f"{ROOT}.errors", f"{ROOT}._lazy"}
    assert "hypothesis" not in loaded and "pydantic" not in loaded


def test_the_layers_in_the_docs_are_the_layers_tested() -> None:
    """docs/machine.md lists the same layers, in the same order, with the same members."""
    text = (PACKAGE.parent / "docs" / "machine.md").read_text(encoding="utf-8")
    section = text.split("## Layers", 1)[1].split("\n## ", 1)[0].split("\n### ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and "`" in line]
    documented = [
        (row.split("|")[1].strip(), tuple(m.strip("`") for m in row.split("|")[2].split()))
        for row in rows
    ]
    assert documented == [(name, tuple(f"{ROOT}.{m}" for m in members)) for name, members in LAYERS]


def test_the_package_top_holds_at_most_twelve_modules() -> None:
    """``ls fsm_agent/`` reads as the layers: the rest of the package is in one folder per
    layer, beside at most twelve loose modules (``__init__`` and ``__main__`` counted)."""
    loose = sorted(path.name for path in PACKAGE.glob("*.py"))
    assert len(loose) <= 12, loose


def test_the_kernel_layers_in_the_docs_are_the_layers_tested() -> None:
    """docs/machine.md lists the kernel's layers as :data:`KERNEL_LAYERS` does."""
    text = (PACKAGE.parent / "docs" / "machine.md").read_text(encoding="utf-8")
    section = text.split("### Inside the kernel", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and "`" in line]
    documented = [
        (row.split("|")[1].strip(), tuple(m.strip("`") for m in row.split("|")[2].split()))
        for row in rows
    ]
    assert documented == [
        (name, tuple(f"{KERNEL}.{m}" for m in members)) for name, members in KERNEL_LAYERS
    ]
