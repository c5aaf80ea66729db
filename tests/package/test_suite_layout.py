"""The test suite keeps its layout (tests/README.md): test modules in folders named after what they
test, support modules in tests/support/, and each fixture name defined once in the whole suite."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
ROOT_FILES = {"conftest.py", "README.md"}
"""The only files at the top of tests/: the suite-wide conftest and the layout's description."""
SHARED_NAMES = {"backend"}
"""Fixture names that several modules define on purpose: the provider conformance claims are
written against a ``backend`` fixture that each suite running them (loopback servers, llmock)
provides with its own backends."""


def _is_fixture(decorator: ast.expr) -> bool:
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    return ast.unparse(target) in {"pytest.fixture", "fixture"}


def _fixture_name(node: ast.FunctionDef | ast.AsyncFunctionDef, decorator: ast.expr) -> str:
    if isinstance(decorator, ast.Call):
        for keyword in decorator.keywords:
            if keyword.arg == "name" and isinstance(keyword.value, ast.Constant):
                return str(keyword.value.value)
    return node.name


def fixture_definitions(tests: Path) -> dict[str, list[str]]:
    """Every fixture defined under ``tests``: its name, and where each definition is."""
    found: dict[str, list[str]] = defaultdict(list)
    for path in sorted(tests.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for decorator in node.decorator_list:
                if _is_fixture(decorator):
                    where = f"{path.relative_to(tests).as_posix()}:{node.lineno}"
                    found[_fixture_name(node, decorator)].append(where)
    return found


def test_no_test_or_support_module_sits_directly_in_tests() -> None:
    """The top of tests/ holds only conftest.py, README.md and folders: a test module goes in the
    folder of what it tests, a shared module in tests/support/."""
    loose = sorted(
        path.name for path in TESTS.iterdir() if path.is_file() and path.name not in ROOT_FILES
    )
    assert loose == [], f"move these into a folder of tests/ (see tests/README.md): {loose}"


def test_test_modules_sit_one_folder_down_and_support_holds_none() -> None:
    """Every test module is tests/<area>/test_*.py, and tests/support/ holds no test module."""
    misplaced = sorted(
        path.relative_to(TESTS).as_posix()
        for path in TESTS.rglob("test_*.py")
        if len(path.relative_to(TESTS).parts) != 2 or path.parent.name == "support"
    )
    assert misplaced == []


def test_test_module_names_are_unique_across_folders() -> None:
    """Two test modules never share a name: the folders have no ``__init__.py``, so pytest
    imports each module by its bare name."""
    seen: dict[str, list[str]] = defaultdict(list)
    for path in TESTS.rglob("*.py"):
        if path.name != "conftest.py":
            seen[path.name].append(path.relative_to(TESTS).as_posix())
    assert {name: where for name, where in seen.items() if len(where) > 1} == {}


def test_each_fixture_name_is_defined_once_in_the_suite() -> None:
    """A fixture name means one thing in the whole suite: no module shadows another's fixture
    (shared fixtures live in tests/conftest.py, each meaning under its own name)."""
    twice = {
        name: where
        for name, where in fixture_definitions(TESTS).items()
        if len(where) > 1 and name not in SHARED_NAMES
    }
    assert twice == {}


def test_the_named_exceptions_are_still_needed() -> None:
    """Every name allowed to be defined more than once still is (else it leaves the list)."""
    definitions = fixture_definitions(TESTS)
    assert {name for name in SHARED_NAMES if len(definitions[name]) > 1} == SHARED_NAMES
