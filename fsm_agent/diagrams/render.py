"""Rendering DOT with Graphviz (the ``[diagrams]`` extra), re-exported by :mod:`fsm_agent.diagrams`.

``pygraphviz`` comes first: its wheels bundle the Graphviz libraries, so no system package is
needed. The fallback is the ``graphviz`` package driving a system ``dot``. With neither, rendering
raises :class:`RenderingUnavailableError`, whose message says what to install.
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Literal

from ..errors import ConfigurationError

__all__ = [
    "INSTALL_HINT",
    "TEMPLATE_WARNING",
    "RenderFormat",
    "RenderingUnavailableError",
    "dot_digest",
    "render",
    "stamp_svg",
    "svg_digest",
]

INSTALL_HINT = "pip install -e '.[diagrams]' in a checkout of fsm_agent"
"""The command that installs a renderer."""


class RenderingUnavailableError(ConfigurationError):
    """Neither ``pygraphviz`` nor the ``graphviz`` package with a system ``dot`` is available."""

    def __init__(self, fmt: str) -> None:
        super().__init__(
            f"rendering {fmt.upper()} needs Graphviz: {INSTALL_HINT} "
            "(DOT and Mermaid text need nothing)"
        )


RenderFormat = Literal["svg", "png", "json"]
"""What :func:`render` makes: an SVG or PNG picture, or Graphviz's ``json`` layout (every
node's and label's position and size, for measuring a picture)."""


def render(dot: str, fmt: RenderFormat = "svg") -> bytes:
    """Lay DOT text out with Graphviz's ``dot`` as SVG, PNG or JSON bytes.

    Uses ``pygraphviz`` when installed, else the ``graphviz`` package with a system ``dot``;
    raises :class:`RenderingUnavailableError` (with the install command) when neither works.
    """
    try:
        import pygraphviz
    except ImportError:
        return _render_with_system_dot(dot, fmt)
    graph = pygraphviz.AGraph(string=dot)
    if _fontconfig.loaded:
        drawn: bytes = graph.draw(format=fmt, prog="dot")
        return drawn
    with _fontconfig.lock:  # the first layout loads fontconfig: once, with its warnings sorted
        with _without_template_warnings():
            drawn = graph.draw(format=fmt, prog="dot")
        _fontconfig.loaded = True
    return drawn


class _Fontconfig:
    """Whether this process has loaded the fontconfig bundled with ``pygraphviz``."""

    def __init__(self) -> None:
        self.loaded = False
        self.lock = threading.Lock()


_fontconfig = _Fontconfig()

TEMPLATE_WARNING = re.compile(
    rb'Fontconfig warning: "[^"\n]*/conf\.avail/[^"\n]*", line \d+: unknown element "[^"\n]*"\n'
)
"""The warning an older fontconfig prints when it loads: the fontconfig in ``pygraphviz``'s
wheels reads every sample file of the system's ``conf.avail`` (to list their descriptions, not
to apply them), and a newer system ships samples in a syntax it does not know. Nothing it
applies is affected; any other line fontconfig or Graphviz writes is kept."""


@contextmanager
def _without_template_warnings() -> Iterator[None]:
    """Hold back what is written to the process's standard error meanwhile, then write it out
    less the lines that are :data:`TEMPLATE_WARNING`. Where standard error is no file
    descriptor, nothing is held back."""
    sys.stderr.flush()
    try:
        saved = os.dup(2)
    except OSError:
        yield
        return
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            rest = TEMPLATE_WARNING.sub(b"", held.read())
            if rest:
                os.write(2, rest)


def _render_with_system_dot(dot: str, fmt: RenderFormat) -> bytes:
    try:
        import graphviz
    except ImportError:
        raise RenderingUnavailableError(fmt) from None
    try:
        drawn: bytes = graphviz.Source(dot).pipe(format=fmt)
    except graphviz.ExecutableNotFound:
        raise RenderingUnavailableError(fmt) from None
    return drawn


_STAMP = b"<!-- fsm_agent dot sha256: "


def stamp_svg(svg: bytes, dot: str) -> bytes:
    """``svg`` with a comment recording the digest of the DOT it was rendered from, so a check
    can tell a stale SVG without rendering (layouts differ between Graphviz versions)."""
    head, _, rest = svg.partition(b"\n")
    return b"%s\n%s%s -->\n%s" % (head, _STAMP, dot_digest(dot).encode(), rest)


def svg_digest(svg: bytes) -> str | None:
    """The DOT digest :func:`stamp_svg` recorded in ``svg``, or ``None``."""
    start = svg.find(_STAMP)
    if start < 0:
        return None
    start += len(_STAMP)
    return svg[start : svg.find(b" ", start)].decode()


def dot_digest(dot: str) -> str:
    """The digest :func:`stamp_svg` records for ``dot``."""
    return hashlib.sha256(dot.encode()).hexdigest()
