"""The maps of the package name what is there: docs/machine.md's concept map names every module,
and the reading order in ``fsm_agent``'s docstring every top-level module and subpackage."""

from __future__ import annotations

import re
from pathlib import Path

import fsm_agent

PACKAGE = Path(fsm_agent.__file__).parent
ROOT = PACKAGE.parent


def _concept_map() -> list[str]:
    """The module column of each row of docs/machine.md's concept map."""
    text = (ROOT / "docs" / "machine.md").read_text(encoding="utf-8")
    section = text.split("## Where each concept lives", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and "`" in line]
    return [row.rstrip(" |").rsplit(" | ", 1)[1] for row in rows]


def named_by_the_map(cells: list[str], root: Path = ROOT) -> tuple[set[Path], list[str]]:
    """The files a concept map's cells name, and the names that match no file or package.

    A cell names files (``fsm_agent/x.py``) and packages (``fsm_agent/x/``); a package names
    all its modules, unless the cell lists some of them after it (``(`a.py`, `b.py`)``), which
    then are the ones named."""
    named: set[Path] = set()
    missing: list[str] = []
    for cell in cells:
        package: Path | None = None
        listed: list[str] = []
        for token in re.findall(r"`([^`]+)`", cell):
            if token.startswith("fsm_agent/") and token.endswith("/"):
                if package is not None and not listed:
                    named.update(package.rglob("*.py"))
                package, listed = root / token, []
                if not package.is_dir():
                    missing.append(token)
            elif token.startswith("fsm_agent/"):
                if not (root / token).is_file():
                    missing.append(token)
                named.add(root / token)
            elif token.endswith(".py") and package is not None:
                listed.append(token)
                if not (package / token).is_file():
                    missing.append(f"{package.relative_to(root)}/{token}")
                named.add(package / token)
        if package is not None and not listed:
            named.update(package.rglob("*.py"))
    return named, missing


def test_every_module_the_concept_map_names_exists() -> None:
    """Each file and package in docs/machine.md's concept map is in the package."""
    assert named_by_the_map(_concept_map())[1] == []


def test_the_concept_map_names_every_module() -> None:
    """Every module of the package has its row in the concept map (a subpackage's
    ``__init__.py`` goes with its package)."""
    named = named_by_the_map(_concept_map())[0]
    modules = {
        path
        for path in PACKAGE.rglob("*.py")
        if path.name != "__init__.py" or path.parent == PACKAGE
    }
    assert sorted(str(m.relative_to(ROOT)) for m in modules - named) == []


def test_the_concept_map_reader_sees_a_stale_name(tmp_path: Path) -> None:
    """A name of no file, and a package cell listing a missing module, are reported; a package
    named whole covers its modules."""
    (tmp_path / "fsm_agent" / "sub").mkdir(parents=True)
    for name in ("a.py", "sub/b.py", "sub/c.py"):
        (tmp_path / "fsm_agent" / name).write_text("")
    named, missing = named_by_the_map(
        ["`fsm_agent/a.py`, `fsm_agent/gone.py`", "`fsm_agent/sub/` (`b.py`, `d.py`)"], tmp_path
    )
    assert missing == ["fsm_agent/gone.py", "fsm_agent/sub/d.py"]
    assert tmp_path / "fsm_agent" / "sub" / "c.py" not in named
    whole, _ = named_by_the_map(["`fsm_agent/sub/`"], tmp_path)
    assert whole == {tmp_path / "fsm_agent" / "sub" / n for n in ("b.py", "c.py")}


def test_the_reading_order_names_every_top_level_module_and_nothing_else() -> None:
    """``fsm_agent``'s docstring names each public top-level module and subpackage, and only
    those that exist."""
    doc = fsm_agent.__doc__ or ""
    order = doc.split("Read the package in this order", 1)[1]
    named = set(re.findall(r":mod:`fsm_agent\.(\w+)", order))
    present = {
        path.stem if path.is_file() else path.name
        for path in PACKAGE.iterdir()
        if (path.suffix == ".py" or (path / "__init__.py").is_file())
        and not path.name.startswith("_")
    }
    assert sorted(named - present) == []
    assert sorted(present - named) == []
