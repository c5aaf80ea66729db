"""Test doubles for your tests: a scripted model, its builders, a virtual clock, and
``fuzz_agent``, the fuzzer in one line.

``ScriptedModel`` replays a list of turns, one per model call, and records every request it
receives. Build turns with :func:`text`, :func:`answer`, :func:`tool_call`, :func:`tool_calls`,
:func:`finish` and :func:`fail`::

    model = ScriptedModel([tool_call("add", {"a": 1, "b": 2}), text("3")])

The doubles live in :mod:`.scripted`, low in the import graph (replay, the fuzzer and the
demo build on them); :func:`fuzz_agent` (in :mod:`.fuzz`) runs the fuzzer, and the crash
simulation (in :mod:`.crash`) builds on the kernel: :func:`crash_and_resume` stops a run as a
crash would (with :class:`CrashingCheckpointer`) and resumes it, and
:func:`resume_differences` compares the result with an uninterrupted run's. The hypothesis
strategies for your own property tests (in :mod:`.strategies`) draw what the fuzzer draws:
:func:`cases`, :func:`scripts`, :func:`policies`, :func:`hook_plans` and :func:`verifiers`.
They and ``fuzz_agent`` need hypothesis (``pip install -e '.[testing]'`` in a checkout).

Each name loads with its module on first use, so importing this package, or
:mod:`.scripted`, loads no kernel, store, fuzzer or hypothesis.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import facade

if TYPE_CHECKING:
    from ..models.scripted import (
        DEFAULT_USAGE,
        Failure,
        ScriptedModel,
        ScriptExhaustedError,
        Turn,
        VirtualClock,
        answer,
        fail,
        finish,
        text,
        tool_call,
        tool_calls,
    )
    from .crash import CrashingCheckpointer, SimulatedCrash, crash_and_resume, resume_differences
    from .fuzz import fuzz_agent
    from .strategies import cases, hook_plans, policies, scripts, verifiers


__all__ = [
    "DEFAULT_USAGE",
    "CrashingCheckpointer",
    "Failure",
    "ScriptExhaustedError",
    "ScriptedModel",
    "SimulatedCrash",
    "Turn",
    "VirtualClock",
    "answer",
    "cases",
    "crash_and_resume",
    "fail",
    "finish",
    "fuzz_agent",
    "hook_plans",
    "policies",
    "resume_differences",
    "scripts",
    "text",
    "tool_call",
    "tool_calls",
    "verifiers",
]

__getattr__, __dir__ = facade(globals())
