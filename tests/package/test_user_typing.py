"""User code type-checks under ``mypy --strict``, with and without the pydantic plugin: the
typed-usage file, every Python block of the docs and every example."""

from __future__ import annotations

from pathlib import Path

import pytest
from mypy import api

from docs_blocks import ROOT, doc_blocks, examples

_COMMON = """\
[mypy]
strict = True
python_version = 3.11
{plugins}
[mypy-transitions.*,pygraphviz.*,graphviz.*,tiktoken.*]
ignore_missing_imports = True
"""


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
    config.write_text(_COMMON.format(plugins="plugins = pydantic.mypy" if plugin else ""))
    files = [str(ROOT / "tests" / "support" / "typing_usage.py")]
    for program in doc_blocks() + examples():
        path = tmp_path / f"{program.module}.py"
        path.write_text(program.code)
        files.append(str(path))
    cache = ROOT / ".mypy_cache" / ("user-plugin" if plugin else "user-no-plugin")
    out, err, status = api.run(["--config-file", str(config), "--cache-dir", str(cache), *files])
    assert status == 0, out + err
