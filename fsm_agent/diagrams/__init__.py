"""Diagrams of the machine, drawn from the same table that runs it.

Three levels: the *overview* (:func:`overview_dot`, :func:`overview_mermaid`: the states and one
edge per pair of states, the picture of the README), the *detail* of one state
(:func:`state_dot`, :func:`state_mermaid`: its rows in order with guards, stop reasons and
counter updates), and a *run* (the overview of a :class:`Plan` that holds a :class:`RunPath`:
the run's path drawn on it). :func:`to_dot` and :func:`to_mermaid` draw every row at once.

Three layers, each usable alone (modules :mod:`.text`, :mod:`.trace` and :mod:`.render`):

1. :func:`plan` turns the rows, optionally a :class:`Scope` (a policy's numbers and the outcomes
   its agent can never report) and a :class:`RunPath` (a recorded run), into plain data: one
   :class:`Node` per state and one :class:`Edge` per row, with labels and flags.
2. :func:`overview_dot`, :func:`state_dot` and :func:`to_dot` (and their Mermaid twins) write
   that data as Graphviz DOT and as Mermaid ``stateDiagram-v2`` text: pure, deterministic, no
   dependency. Styles are data (:data:`DOT_STYLES`, :data:`OVERVIEW_STYLES`,
   :data:`DETAIL_STYLES`).
3. :func:`render` lays DOT out as SVG, PNG or Graphviz's ``json`` layout (every label's
   position and size, to measure a picture) with Graphviz: through ``pygraphviz`` (its wheels
   bundle the Graphviz libraries), else the ``graphviz`` package and a system ``dot``, else a
   :class:`RenderingUnavailableError` that says what to install.

An edge reads like a UML transition, ``outcome [guard] / stop reason``; where several rows share a
(state, outcome), they are numbered in the order they are tried and the last one reads ``[else]``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import facade

# Bound at import: ``render`` is named like its module, and an import of the submodule
# ``fsm_agent.diagrams.render`` that came first would otherwise leave the module in its place.
from .render import (
    RenderFormat,
    RenderingUnavailableError,
    dot_digest,
    render,
    stamp_svg,
    svg_digest,
)

if TYPE_CHECKING:
    from ..machine.guards import guard_label
    from .detail import DETAIL_STYLES, state_dot, state_mermaid
    from .levels import OVERVIEW_STYLES, overview_dot, overview_mermaid
    from .text import DOT_STYLES, Edge, Node, Plan, Scope, plan, to_dot, to_mermaid
    from .trace import RunPath, TraceError, read_trace

__all__ = [
    "DETAIL_STYLES",
    "DOT_STYLES",
    "OVERVIEW_STYLES",
    "Edge",
    "Node",
    "Plan",
    "RenderFormat",
    "RenderingUnavailableError",
    "RunPath",
    "Scope",
    "TraceError",
    "dot_digest",
    "guard_label",
    "overview_dot",
    "overview_mermaid",
    "plan",
    "read_trace",
    "render",
    "stamp_svg",
    "state_dot",
    "state_mermaid",
    "svg_digest",
    "to_dot",
    "to_mermaid",
]

# The other names load with their module on first use: a command that only labels the rows
# (the trace of a run) imports neither the detail drawings nor the overview.
__getattr__, __dir__ = facade(globals())
