"""Rendering writes nothing to standard error but what matters: the fontconfig bundled with
pygraphviz warns about the system's sample files when it loads, and that warning is dropped;
any other line is kept."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytest.importorskip("pygraphviz", reason="rendering needs the [diagrams] extra")


def _python(code: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter, so fontconfig loads in it for the first time."""
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )


def test_a_first_render_writes_no_fontconfig_warning() -> None:
    """The first SVG, PNG and JSON layouts of a process leave standard error empty."""
    done = _python(
        "from fsm_agent import diagrams\n"
        "dot = diagrams.overview_dot()\n"
        "for fmt in ('json', 'svg', 'png'):\n"
        "    diagrams.render(dot, fmt)\n"
    )
    assert done.stderr == ""


def test_only_the_sample_file_warning_is_dropped() -> None:
    """While the first layout runs, a sample-file warning written to standard error is dropped
    and every other line comes out, in order."""
    done = _python(
        "import os\n"
        "from fsm_agent.diagrams.render import _without_template_warnings\n"
        "with _without_template_warnings():\n"
        "    os.write(2, b'before\\n')\n"
        "    os.write(2, b'Fontconfig warning: \"/usr/share/fontconfig/conf.avail/"
        '05-reset-dirs-sample.conf", line 6: unknown element "reset-dirs"\\n\')\n'
        "    os.write(2, b'Fontconfig error: Cannot load default config file\\n')\n"
        '    os.write(2, b\'Fontconfig warning: "/etc/fonts/local.conf", line 3: '
        'unknown element "x"\\n\')\n'
    )
    assert done.stderr.splitlines() == [
        "before",
        "Fontconfig error: Cannot load default config file",
        'Fontconfig warning: "/etc/fonts/local.conf", line 3: unknown element "x"',
    ]
