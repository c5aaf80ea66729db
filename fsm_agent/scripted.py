"""The old path of :mod:`fsm_agent.testing.scripted`, kept so that code importing the scripted
model from here goes on working; new code imports it from :mod:`fsm_agent.testing`."""

from .testing.scripted import (
    DEFAULT_USAGE,
    Failure,
    ScriptedModel,
    ScriptExhaustedError,
    ScriptPlayer,
    StreamingScriptPlayer,
    Turn,
    VirtualClock,
    answer,
    fail,
    finish,
    text,
    tool_call,
    tool_calls,
    with_call_ids,
)

__all__ = [
    "DEFAULT_USAGE",
    "Failure",
    "ScriptExhaustedError",
    "ScriptPlayer",
    "ScriptedModel",
    "StreamingScriptPlayer",
    "Turn",
    "VirtualClock",
    "answer",
    "fail",
    "finish",
    "text",
    "tool_call",
    "tool_calls",
    "with_call_ids",
]
