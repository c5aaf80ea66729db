"""User code type-checks under ``mypy --strict``, with and without the pydantic plugin: the
typed-usage file, every Python block of the docs and every example."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from mypy import api

from docs_blocks import ROOT, doc_blocks, examples

# The docs name tiktoken in a block that is not run; users need not have it to type-check.
_UNTYPED_FOR_USERS = ["tiktoken.*"]


def _config(plugin: bool) -> str:
    """The project's own mypy options (pyproject.toml), with or without its plugins.

    With the plugins they are exactly the options ``mypy`` runs with, so the project's cache
    (warm after ``mypy``, which ``.ci/run`` runs first) answers for fsm_agent and everything it
    imports: about a second, against half a minute on a fresh cache.
    """
    options = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["mypy"]
    untyped = [m for o in options["overrides"] if o["ignore_missing_imports"] for m in o["module"]]
    lines = [
        "[mypy]",
        f"strict = {options['strict']}",
        f"python_version = {options['python_version']}",
    ]
    if plugin:
        lines.append(f"plugins = {', '.join(options['plugins'])}")
    lines += [f"[mypy-{','.join(untyped + _UNTYPED_FOR_USERS)}]", "ignore_missing_imports = True"]
    return "\n".join(lines) + "\n"


# Without the plugin (about 40 s on a fresh cache) is `slow`: the same files pass mypy --strict
# with the plugin by default, and this run only adds what the plugin changes.
@pytest.mark.parametrize(
    "plugin",
    [
        pytest.param(True, id="pydantic-plugin"),
        pytest.param(False, id="no-plugin", marks=pytest.mark.slow),
    ],
)
def test_user_code_passes_mypy_strict(plugin: bool, tmp_path: Path) -> None:
    """Every docs block, every example and tests/support/typing_usage.py pass mypy --strict."""
    config = tmp_path / "mypy.ini"
    config.write_text(_config(plugin))
    files = [str(ROOT / "tests" / "support" / "typing_usage.py")]
    for program in doc_blocks() + examples():
        path = tmp_path / f"{program.module}.py"
        path.write_text(program.code)
        files.append(str(path))
    cache = ROOT / ".mypy_cache"
    if not plugin:
        cache = cache / "user-no-plugin"
    out, err, status = api.run(["--config-file", str(config), "--cache-dir", str(cache), *files])
    assert status == 0, out + err
