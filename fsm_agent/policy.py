"""Policies: every limit of a run in one validated, serialisable value, plus the backoff maths.

Defaults: 200 steps, retries with exponential backoff, 3 consecutive failed tool turns,
3 compaction attempts in a row, a 30 s tool timeout.
"""

from __future__ import annotations

import math
import random
from enum import StrEnum
from typing import Any, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ModelWrapValidatorHandler,
    ValidationError,
    model_validator,
)

from .errors import PolicyError
from .machine.table import Limits

_COUNT = 1_000_000
"""The largest count a policy accepts (steps, retries, errors, calls, requests): a limit past it
bounds nothing a run could reach, and the worst cases computed from it stop meaning anything."""
_DAY_S = 86_400.0
"""The longest single wait a policy accepts (a timeout, a backoff delay), in seconds."""
_MONTH_S = 30 * _DAY_S
"""The longest wall-clock budget a policy accepts, in seconds."""
_TOKENS = 10**12
"""The largest token count a usage limit accepts."""

__all__ = [
    "CompactionSettings",
    "CompactionStrategyName",
    "HookFailureMode",
    "LoopGuardAction",
    "Policy",
    "RetryPolicy",
    "ToolFailureMode",
    "ToolOutputSettings",
    "UsageLimits",
    "backoff_delay",
    "limits_of",
]


class _PolicyModel(BaseModel):
    """Frozen, strict-keyed model whose validation errors surface as :class:`PolicyError`."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)  # built on first use

    @model_validator(mode="wrap")
    @classmethod
    def _as_policy_error(cls, data: Any, handler: ModelWrapValidatorHandler[Self]) -> Self:
        # pydantic only wraps ValueError/AssertionError, so a PolicyError raised here (or in an
        # "after" validator, which runs outside this wrapper) passes through unchanged, also out
        # of an enclosing model's validation.
        try:
            return handler(data)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in err['loc']) or cls.__name__}: {err['msg']}"
                for err in exc.errors(include_url=False)
            )
            raise PolicyError(f"invalid {cls.__name__}: {problems}") from None


class ToolFailureMode(StrEnum):
    """What a tool error does to the run."""

    CONTINUE = "continue"  # report the error to the model as an is_error result [S004]
    FAIL = "fail"  # abort the run at the first tool error, keeping the error [S004]


class HookFailureMode(StrEnum):
    """What a hook that raises or overruns its timeout does to the run (it always emits
    ``hook_error``)."""

    CONTINUE = "continue"  # the hook's answer is ignored and the run goes on [S001 §10]
    FAIL = "fail"  # the run aborts with stop reason hook_error, keeping the HookError


class LoopGuardAction(StrEnum):
    """What the loop guard does when the model keeps repeating the same tool calls."""

    WARN = "warn"  # a warning is added to the turn's last tool result; the run goes on
    FINALIZE = "finalize"  # the run finalizes with stop reason repeated_tool_calls


class RetryPolicy(_PolicyModel):
    """How failed model calls are retried: exponential backoff with jitter.

    A retry happens only for errors the provider marks retryable. When the server says how long
    to wait (``Retry-After``) and ``honour_retry_after`` is set, that wait is used instead of the
    computed one; a server wait longer than ``max_delay_s`` ends the retries (the error is kept).
    """

    max_retries: int = Field(
        default=5, ge=0, le=_COUNT, description="retries after the first attempt"
    )
    base_delay_s: float = Field(default=1.0, ge=0, le=_DAY_S, allow_inf_nan=False)
    max_delay_s: float = Field(default=60.0, ge=0, le=_DAY_S, allow_inf_nan=False)
    jitter: float = Field(default=0.2, ge=0, le=1, allow_inf_nan=False, description="± fraction")
    retryable_statuses: frozenset[int] = frozenset({408, 409, 429, 500, 502, 503, 504, 529})
    honour_retry_after: bool = True

    @model_validator(mode="after")
    def _delays_ordered(self) -> Self:
        if self.base_delay_s > self.max_delay_s:
            raise PolicyError(
                f"invalid RetryPolicy: base_delay_s ({self.base_delay_s}) must not exceed "
                f"max_delay_s ({self.max_delay_s})"
            )
        return self


def backoff_delay(
    retry: RetryPolicy, attempt: int, retry_after: float | None, rng: random.Random
) -> float | None:
    """Seconds to wait before retry number ``attempt`` (1-based), or ``None`` to give up
    because the server asked for a wait longer than ``retry.max_delay_s``."""
    if retry_after is not None and retry.honour_retry_after:
        if not math.isfinite(retry_after) or retry_after > retry.max_delay_s:
            return None
        return max(0.0, retry_after)
    # 2.0 ** 1024 overflows; by 2 ** 1000 any base delay is long past max_delay_s already.
    delay: float = min(retry.max_delay_s, retry.base_delay_s * 2.0 ** min(attempt - 1, 1000))
    if retry.jitter:
        delay *= 1 + retry.jitter * (2 * rng.random() - 1)
    return min(retry.max_delay_s, max(0.0, delay))


class UsageLimits(_PolicyModel):
    """Usage caps for one run; reaching one moves the run to ``finalizing``.

    ``max_requests`` counts model-call attempts, failed and retried ones included.
    """

    max_requests: int | None = Field(default=None, gt=0, le=_COUNT)
    max_input_tokens: int | None = Field(default=None, gt=0, le=_TOKENS)
    max_output_tokens: int | None = Field(default=None, gt=0, le=_TOKENS)
    max_total_tokens: int | None = Field(default=None, gt=0, le=_TOKENS)
    max_cost_usd: float | None = Field(default=None, gt=0, le=1e9, allow_inf_nan=False)


class CompactionStrategyName(StrEnum):
    """A built-in compaction strategy, as named in :attr:`CompactionSettings.strategies`."""

    TRIM_TOOL_OUTPUTS = "trim_tool_outputs"  # old tool outputs become a short marker [S000]
    SUMMARIZE = "summarize"  # a tools-off model call replaces the oldest part with a summary
    SLIDING_WINDOW = "sliding_window"  # the oldest call/result groups are dropped [S004]


class CompactionSettings(_PolicyModel):
    """When the context is compacted: above ``threshold`` × the context window.

    ``context_window`` overrides the model's declared window; with neither, only a ``length``
    finish or a context-window error triggers compaction. ``keep_recent_messages`` are never
    removed by the sliding window.

    A compaction shortens the history to ``target`` × that budget, trying ``strategies`` in
    order until it fits (the gap makes compactions rare). ``max_messages`` adds a message-count
    window: above it the oldest groups go too, down to ``target`` × ``max_messages``.
    ``summarize`` must be followed by ``sliding_window``, its fallback when the summary call
    fails. With ``use_reported_usage``, the input tokens a provider reports for a call replace
    the estimate of the history it was sent.
    """

    threshold: float = Field(default=0.8, gt=0, le=1, allow_inf_nan=False)
    context_window: int | None = Field(default=None, gt=0, le=_TOKENS)
    keep_recent_messages: int = Field(default=2, ge=1)
    target: float = Field(default=0.6, gt=0, le=1, allow_inf_nan=False, description="× the budget")
    strategies: tuple[CompactionStrategyName, ...] = (
        CompactionStrategyName.TRIM_TOOL_OUTPUTS,
        CompactionStrategyName.SLIDING_WINDOW,
    )
    max_messages: int | None = Field(default=None, ge=2, description="message-count window")
    trim_tool_outputs_over: int = Field(default=200, ge=0, description="characters")
    summary_max_tokens: int = Field(default=1024, gt=0, le=_TOKENS)
    summary_prompt: str | None = Field(
        default=None, description="replaces the built-in instructions"
    )
    use_reported_usage: bool = True

    @model_validator(mode="after")
    def _coherent(self) -> Self:
        problems: list[str] = []
        names = self.strategies
        if not names:
            problems.append("strategies must name at least one strategy")
        if len(set(names)) != len(names):
            problems.append("strategies must not repeat a strategy")
        summarize = CompactionStrategyName.SUMMARIZE
        if (
            summarize in names
            and CompactionStrategyName.SLIDING_WINDOW not in names[names.index(summarize) + 1 :]
        ):
            problems.append("summarize must be followed by sliding_window (its fallback)")
        if problems:
            raise PolicyError(f"invalid CompactionSettings: {'; '.join(problems)}")
        return self


class ToolOutputSettings(_PolicyModel):
    """How much of a tool's output goes into the history.

    A result longer than ``max_chars`` is cut to that length with a marker; its full text stays
    in the run's store (:attr:`RunState.tool_outputs`), which the model pages through with the
    built-in ``read_tool_output`` tool. With ``keep_recent`` set, before each model call every
    tool result older than the ``keep_recent`` newest is cut to ``old_max_chars`` the same way
    (``trimToolOutputs``). ``max_chars=None`` keeps outputs whole.
    """

    max_chars: int | None = Field(default=50_000, ge=1_000, description="per result in the history")
    keep_recent: int | None = Field(default=None, ge=0, description="tool results kept whole")
    old_max_chars: int = Field(default=1_000, ge=0, description="older results are cut to this")


class Policy(_PolicyModel):
    """Every limit of a run. Policies are data: they validate, serialise and print.

    Stop conditions are code, not data, so they are given to the :class:`~fsm_agent.Agent`.
    """

    max_steps: int | None = Field(
        default=200, gt=0, le=_COUNT, description="successful model turns per run"
    )
    retry: RetryPolicy = Field(default_factory=RetryPolicy)
    max_consecutive_errors: int = Field(
        default=3, gt=0, le=_COUNT, description="failed tool turns in a row"
    )
    max_total_errors: int | None = Field(
        default=None, gt=0, le=_COUNT, description="model errors + failed turns"
    )
    max_compaction_attempts: int = Field(default=3, ge=0, le=_COUNT)
    max_verifications: int = Field(
        default=3, ge=0, le=_COUNT, description="rejections sent back to the model"
    )
    max_continuations: int = Field(
        default=1,
        ge=0,
        le=_COUNT,
        description="continuation turns after answers cut by the output cap",
    )
    require_done_tool: bool = False
    tool_timeout_s: float = Field(default=30.0, gt=0, le=_DAY_S, allow_inf_nan=False)
    tool_failure_mode: ToolFailureMode = ToolFailureMode.CONTINUE
    parallel_tool_calls: bool = True
    max_tool_calls: int | None = Field(
        default=None, gt=0, le=_COUNT, description="tool executions per run"
    )
    max_wall_clock_s: float | None = Field(
        default=None,
        gt=0,
        le=_MONTH_S,
        allow_inf_nan=False,
        description="seconds of active running per run, summed over resumes (a suspended "
        "run's wait does not count)",
    )
    usage_limits: UsageLimits = Field(default_factory=UsageLimits)
    compaction: CompactionSettings = Field(default_factory=CompactionSettings)
    summarize_on_max_steps: bool = True
    tool_output: ToolOutputSettings = Field(default_factory=ToolOutputSettings)
    hook_timeout_s: float = Field(
        default=10.0, gt=0, le=_DAY_S, allow_inf_nan=False, description="per hook call"
    )
    hook_failure_mode: HookFailureMode = HookFailureMode.CONTINUE
    max_repeated_tool_calls: int | None = Field(
        default=None,
        ge=2,
        le=_COUNT,
        description="loop guard: the same calls this many times in a row",
    )
    on_repeated_tool_calls: LoopGuardAction = LoopGuardAction.WARN
    max_handoffs: int | None = Field(
        default=None,
        ge=0,
        le=_COUNT,
        description="handoffs per run (None: each spends its turn's step, so max_steps bounds "
        "them)",
    )

    @model_validator(mode="after")
    def _bounded(self) -> Self:
        if (
            self.max_steps is None
            and self.max_wall_clock_s is None
            and self.usage_limits.max_requests is None
        ):
            raise PolicyError(
                "invalid Policy: max_steps=None leaves the run unbounded: set max_steps, "
                "max_wall_clock_s or usage_limits.max_requests"
            )
        return self


def limits_of(
    policy: Policy, *, verification: bool, models: int = 1, output_validation: bool = False
) -> Limits:
    """The numbers the table's guards read, from a policy, whether answers are verified, how
    many models a fallback chain holds (1: a single model) and whether answers are validated as
    an output type."""
    return Limits(
        max_steps=policy.max_steps,
        max_retries=policy.retry.max_retries,
        max_consecutive_errors=policy.max_consecutive_errors,
        max_total_errors=policy.max_total_errors,
        max_compaction_attempts=policy.max_compaction_attempts,
        max_verifications=policy.max_verifications,
        max_continuations=policy.max_continuations,
        verification=verification or policy.require_done_tool,
        max_repeated_tool_calls=policy.max_repeated_tool_calls,
        finalize_repeated_tool_calls=policy.on_repeated_tool_calls is LoopGuardAction.FINALIZE,
        max_model_switches=max(0, models - 1),
        output_validation=output_validation,
    )
