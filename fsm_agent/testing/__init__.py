"""Test doubles for your tests: a scripted model, its builders, a virtual clock, and
``fuzz_agent``, the fuzzer in one line.

``ScriptedModel`` replays a list of turns, one per model call, and records every request it
receives. Build turns with :func:`text`, :func:`answer`, :func:`tool_call`, :func:`tool_calls`,
:func:`finish` and :func:`fail`::

    model = ScriptedModel([tool_call("add", {"a": 1, "b": 2}), text("3")])

The doubles live in :mod:`fsm_agent.scripted`, below this package in the import graph (the
fuzzer and replay build on them, and this package on the fuzzer); this package adds
:func:`fuzz_agent` (in :mod:`.fuzz`), which runs the fuzzer, and the crash simulation (in
:mod:`.crash`): :func:`crash_and_resume` stops a run as a crash would (with
:class:`CrashingCheckpointer`) and resumes it, and :func:`resume_differences` compares the
result with an uninterrupted run's.
"""

from __future__ import annotations

from ..scripted import (
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
    "crash_and_resume",
    "fail",
    "finish",
    "fuzz_agent",
    "resume_differences",
    "text",
    "tool_call",
    "tool_calls",
]
