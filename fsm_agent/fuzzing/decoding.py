"""Fuzz cases decoded from plain bytes: model scripts, policies, verifiers, hooks, decisions.

A :class:`Choices` reader turns bytes into choices: each byte is one choice, and a missing byte
is the simplest choice (``0``). Shrinking a byte string (deleting bytes, lowering them) so
shrinks the case it decodes to: a short, simple one. Tool-call arguments come from each
tool's JSON schema, mixed with malformed JSON; tool names include one the agent does not
have. Policies are small, so that every limit is reached. Nothing here imports hypothesis.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any, TypeVar

from pydantic import JsonValue

from ..errors import (
    AuthenticationError,
    ContextWindowExceededError,
    MalformedResponseError,
    ModelConnectionError,
    ModelTimeoutError,
    ProviderServerError,
    RateLimitError,
)
from ..models.scripted import DEFAULT_USAGE, Turn, answer, fail, finish, text, tool_calls
from ..policy import (
    CompactionSettings,
    CompactionStrategyName,
    HookFailureMode,
    LoopGuardAction,
    Policy,
    RetryPolicy,
    ToolFailureMode,
    ToolOutputSettings,
    UsageLimits,
)
from ..providers._output import ANSWER_TOOL
from ..tools.output import PAGER_NAME
from ..values.messages import FinishReason, ModelResponse, ToolDefinition, Usage
from .case import DEFAULT_TOOLS, FuzzAnswer, FuzzCase, HookAnswer, HookPlan, VerifierAnswer

__all__ = [
    "CASE_SIZE",
    "Choices",
    "read_case",
    "read_hook_plan",
    "read_policy",
    "read_script",
    "read_verifier",
]

T = TypeVar("T")
CASE_SIZE = 128
"""Typical bytes per case: generators draw between half and twice as many."""
Args = dict[str, JsonValue] | str
MALFORMED: tuple[str, ...] = ('{"a": 1, "b"', "not json", "[1, 2]", "", '{"unexpected": true}')
"""Raw argument strings a model may send: truncated, not JSON, not an object, wrong keys."""
_WORDS = ("", "a", "ok", "x y", "done", "0")


class Choices:
    """Reads choices from bytes: one byte each, ``0`` (the simplest choice) once they run out."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.position = 0

    def below(self, n: int) -> int:
        """A number in ``range(n)`` (``n`` at most 256)."""
        if self.position >= len(self.data):
            return 0
        value = self.data[self.position]
        self.position += 1
        return value % n

    def chance(self, one_in: int) -> bool:
        """True once in ``one_in`` (the simplest choice is False)."""
        return self.below(one_in) == one_in - 1

    def pick(self, options: Sequence[T]) -> T:
        """One of ``options`` (the first is the simplest)."""
        return options[self.below(len(options))]

    def maybe(self, options: Sequence[T]) -> T | None:
        """``None`` (the simplest) or one of ``options``."""
        index = self.below(len(options) + 1)
        return None if index == 0 else options[index - 1]


# -- arguments ------------------------------------------------------------------------------------
def _value(c: Choices, schema: Mapping[str, Any]) -> JsonValue:
    if "enum" in schema:
        options: list[JsonValue] = list(schema["enum"])
        return c.pick(options)
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return _value(c, c.pick(schema[key]))
    kind = schema.get("type")
    if kind == "integer":
        return c.below(7) - 3
    if kind == "number":
        return c.pick((0.0, 0.5, 2.0, 5.0))
    if kind == "string":
        return c.pick(_WORDS)
    if kind == "boolean":
        return c.chance(2)
    if kind == "array":
        return [_value(c, schema.get("items", {})) for _ in range(c.below(3))]
    if kind == "object":
        return _arguments(c, schema)
    return None


def _arguments(c: Choices, schema: Mapping[str, Any]) -> dict[str, JsonValue]:
    required = set(schema.get("required", ()))
    return {
        name: _value(c, sub)
        for name, sub in schema.get("properties", {}).items()
        if name in required or c.chance(2)
    }


class _Tools:
    """The tools a script may call: the agent's, one it lacks, and the pager."""

    def __init__(self, definitions: Iterable[ToolDefinition]) -> None:
        self.schemas: list[tuple[str, Mapping[str, Any]]] = [
            (d.name, d.parameters) for d in definitions
        ]
        self.schemas.append(("missing", {}))
        if all(name != PAGER_NAME for name, _ in self.schemas):
            pager = {
                "properties": {"call_id": {"enum": ["call_0_0", "call_1_0"]}, "offset": {}},
                "required": ["call_id"],
            }
            self.schemas.append((PAGER_NAME, pager))

    def call(self, c: Choices) -> tuple[str, Args, str | None]:
        name, schema = c.pick(self.schemas)
        args: Args = c.pick(MALFORMED) if c.chance(6) else _arguments(c, schema)
        return name, args, c.maybe(("c1", "c2"))


# -- turns -----------------------------------------------------------------------------------------
_USAGES = (DEFAULT_USAGE, Usage(), Usage(requests=1, input_tokens=40, output_tokens=30))
_FAILURES: tuple[Callable[[], Turn], ...] = (
    fail,
    lambda: fail(RateLimitError("slow down")),
    lambda: fail(RateLimitError("slow down", retry_after=1.0)),
    lambda: fail(RateLimitError("slow down", retry_after=100.0)),
    lambda: fail(ProviderServerError("unavailable", status_code=503)),
    lambda: fail(ProviderServerError("bad request", status_code=400)),
    lambda: fail(ModelTimeoutError("timed out")),
    lambda: fail(MalformedResponseError("garbled")),
    lambda: fail(AuthenticationError("bad key", status_code=401)),
    lambda: fail(ContextWindowExceededError("too long", status_code=400)),
    lambda: fail(ModelConnectionError("the client broke", retryable=False)),
)
_REASONS = (*(r.value for r in FinishReason), "weird_reason")


def _turn(c: Choices, tools: _Tools) -> Turn:
    kind = c.below(8)
    usage = _USAGES[c.below(4) % 3]
    if kind <= 2:  # the simplest turn is a plain answer
        reasoning = c.pick(_WORDS) if c.chance(4) else None
        return text(c.pick(_WORDS), reasoning=reasoning, usage=usage)
    if kind <= 4:
        calls = [tools.call(c) for _ in range(1 + c.below(3))]
        return tool_calls(*calls, text=c.pick(_WORDS), usage=usage)
    if kind == 5:
        named = [tools.call(c)[:2] for _ in range(c.below(2))]
        return finish(c.pick(_REASONS), c.pick(_WORDS), tool_calls=named, usage=usage)
    return c.pick(_FAILURES)()


def read_script(
    c: Choices, definitions: Iterable[ToolDefinition] = (), *, max_size: int = 10
) -> tuple[Turn, ...]:
    """A model script of up to ``max_size`` turns: text, tool calls (malformed, unknown,
    duplicate ids), any finish reason (also an unknown one), retryable and fatal errors."""
    tools = _Tools(definitions)
    return tuple(_turn(c, tools) for _ in range(c.below(max_size + 1)))


# -- policies --------------------------------------------------------------------------------------
_STRATEGIES = (
    (CompactionStrategyName.TRIM_TOOL_OUTPUTS, CompactionStrategyName.SLIDING_WINDOW),
    (CompactionStrategyName.SLIDING_WINDOW,),
    (CompactionStrategyName.SUMMARIZE, CompactionStrategyName.SLIDING_WINDOW),
)


def read_policy(c: Choices) -> Policy:
    """A small policy with every feature in play (retries, error budgets, compaction, output
    limits, usage limits, the loop guard, hook failures), so that every limit is reached."""
    max_requests = c.maybe((1, 2, 3, 6))
    steps = 1 + c.below(6)
    return Policy(
        # Without a step limit only max_requests bounds the run (every attempt counts).
        max_steps=None if max_requests is not None and c.chance(4) else steps,
        retry=RetryPolicy(
            max_retries=c.below(4),
            base_delay_s=0.5,
            max_delay_s=4,
            honour_retry_after=not c.chance(3),
        ),
        max_consecutive_errors=1 + c.below(3),
        max_total_errors=c.maybe((1, 2, 4, 6)),
        max_compaction_attempts=c.below(3),
        max_verifications=c.below(3),
        require_done_tool=c.chance(4),
        parallel_tool_calls=not c.chance(2),
        max_tool_calls=c.maybe((1, 2, 5)),
        tool_failure_mode=ToolFailureMode.FAIL if c.chance(4) else ToolFailureMode.CONTINUE,
        summarize_on_max_steps=not c.chance(3),
        max_wall_clock_s=c.maybe((1.0, 4.0)),
        usage_limits=UsageLimits(
            max_requests=max_requests, max_total_tokens=c.maybe((20, 60, 120))
        ),
        compaction=CompactionSettings(
            context_window=c.maybe((150, 400, 2000)),
            strategies=c.pick(_STRATEGIES),
            max_messages=c.maybe((4, 6, 8)),
            keep_recent_messages=1 + c.below(2),
        ),
        tool_output=ToolOutputSettings(
            # None first: an output limit builds the pager tool for every agent (slow)
            max_chars=c.pick((None, None, 1_000, 50_000)),
            keep_recent=c.maybe((0, 1, 2)),
        ),
        hook_failure_mode=HookFailureMode.FAIL if c.chance(3) else HookFailureMode.CONTINUE,
        max_repeated_tool_calls=c.maybe((2, 3)),
        on_repeated_tool_calls=LoopGuardAction.FINALIZE if c.chance(2) else LoopGuardAction.WARN,
    )


# -- hooks, verifier, the case --------------------------------------------------------------------
_HOOK_ANSWERS: dict[str, tuple[HookAnswer, ...]] = {
    "before_run": ("none", "raise"),
    "after_run": ("none", "raise"),
    "before_model_call": ("none", "raise", "hang", "bad", "respond"),
    "after_model_call": ("none", "raise"),
    "before_tool": ("none", "mock", "skip", "args", "raise", "bad"),
    "approve_tool": ("allow", "deny", "ask", "none", "raise", "bad", "hang"),
    "after_tool": ("none", "args", "raise"),
    "on_transition": ("none", "raise"),
}


def read_hook_plan(c: Choices) -> HookPlan:
    """Hooks that succeed, change things, raise, hang or return nonsense, at some points."""
    if not c.chance(3):
        return HookPlan()
    plan: dict[str, tuple[HookAnswer, ...]] = {}
    for point, options in _HOOK_ANSWERS.items():
        if c.chance(3):
            plan[point] = tuple(c.pick(options) for _ in range(1 + c.below(3)))
    return HookPlan(**plan)


def read_verifier(c: Choices) -> tuple[VerifierAnswer, ...] | None:
    """No verifier, or the planned verifier's answers (accept once they run out)."""
    if not c.chance(3):
        return None
    options: tuple[VerifierAnswer, ...] = ("accept", "reject", "raise")
    return tuple(c.pick(options) for _ in range(c.below(4)))


def read_case(c: Choices, definitions: Iterable[ToolDefinition] | None = None) -> FuzzCase:
    """A fuzz case: for the built-in agent (``definitions=None``) with a policy, verifier,
    hooks and stop condition; for a target agent, with its tools and its own configuration."""
    target = definitions is not None
    tools = list(definitions) if definitions is not None else [t.definition for t in DEFAULT_TOOLS]
    # A target agent's output type comes as the final answer tool: its answers follow the schema.
    output = next((d.parameters for d in tools if d.name == ANSWER_TOOL), None)
    tools = [d for d in tools if d.name != ANSWER_TOOL]
    cancel_after = 1 + c.below(40) if c.chance(5) else None
    pause_after = 1 + c.below(40) if cancel_after is None and c.chance(6) else None
    case = FuzzCase(
        cycle=c.chance(4),
        stream=not c.chance(2),
        chunk_size=8 - c.below(8),
        policy=None if target else read_policy(c),
        verifier=None if target else read_verifier(c),
        hooks=HookPlan() if target else read_hook_plan(c),
        stop_at_step=None if target or not c.chance(6) else 1 + c.below(4),
        decisions=tuple(not c.chance(3) for _ in range(c.below(3))),
        max_resumes=2 - c.below(3) if c.chance(4) else 2,
        cancel_after=cancel_after,
        pause_after=pause_after,
        script=read_script(c, tools),
        fallback=not target and c.chance(5),
        typed=not target and c.chance(4),
    )
    if case.typed:
        output = FuzzAnswer.model_json_schema()
    return case if output is None else _with_typed_answers(c, case, output)


def _with_typed_answers(c: Choices, case: FuzzCase, schema: Mapping[str, Any]) -> FuzzCase:
    """A case for an agent with an output type: some of the script's plain answers become JSON
    that follows the output schema (the others stay words, which fail validation)."""
    script = tuple(
        answer(_arguments(c, schema))
        if isinstance(turn, ModelResponse)
        and turn.finish_reason is FinishReason.STOP
        and not turn.message.tool_calls
        and c.chance(2)
        else turn
        for turn in case.script
    )
    return replace(case, script=script)
