"""Policies: every limit of a run in one validated, serialisable value, plus the backoff maths.

Defaults: 200 steps, retries with exponential backoff, 3 consecutive failed tool turns,
3 compaction attempts in a row, a 30 s tool timeout.

A policy and its parts (:class:`RetryPolicy`, :class:`UsageLimits`, :class:`CompactionSettings`,
:class:`ToolOutputSettings`) are frozen dataclasses, equal when their fields are and hashable.
Their constructors validate as a pydantic model's does, converting what they can (a mapping to
a nested policy, ``"fail"`` to :attr:`ToolFailureMode.FAIL`, ``"5"`` to 5) and raising
:class:`~fsm_agent.PolicyError` for what they cannot, naming each field; writing a field raises
``pydantic.ValidationError``, as on a frozen model. ``model_validate``, ``model_validate_json``
(the same checks, from a mapping or JSON text), ``model_dump``, ``model_dump_json`` and
``model_copy`` (not validated) work as on a pydantic model, and the JSON is the same as when they
were pydantic models, so recordings and policy files written before still load. For the fields
use :func:`dataclasses.fields`; for the JSON schema,
``fsm_agent.values.record.adapter(Policy).json_schema()``. The validator of each type is built
when its first value is, so importing them imports no pydantic.
"""

from __future__ import annotations

import copy
import math
import random
from collections.abc import Callable, Mapping
from dataclasses import MISSING, field, fields
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

from typing_extensions import dataclass_transform

from .errors import PolicyError
from .machine.table import Limits
from .values.define import record
from .values.record import Record, adapter
from .values.schema import Schema

if TYPE_CHECKING:
    from typing import Self

    from pydantic import GetCoreSchemaHandler
    from pydantic_core import CoreSchema, ErrorDetails

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


class _PolicyValue(Record):
    """A frozen policy value, validated when built: by its constructor (which, like a pydantic
    model's, converts what it can, such as a mapping to a nested policy or ``"fail"`` to a
    :class:`ToolFailureMode`) and where it is read back (``model_validate``, a recording).
    Invalid input raises :class:`PolicyError`, naming each field and what is wrong with it.

    The validator is pydantic's, built from the fields' annotations when the first value of
    the type is built (importing the type imports no pydantic).
    """

    __slots__ = ()

    def __init__(self, **data: Any) -> None:
        """The value of the fields in ``data`` (by name; the others take their defaults),
        validated; raises :class:`PolicyError`. Type checkers read the fields' signature."""
        adapter(type(self)).validator.validate_python(data, self_instance=self)

    def model_copy(self, *, update: Mapping[str, Any] | None = None) -> Self:
        """A copy with the fields in ``update`` replaced, not validated (as a pydantic model's
        ``model_copy``: the caller vouches for the values)."""
        made = copy.copy(self)
        for name, value in (update or {}).items():
            object.__setattr__(made, name, value)
        return made

    @classmethod
    def _defaults(cls) -> Self:
        """The value with every field at its default, as ``cls()`` builds it, but not validated
        (the defaults are valid): a policy's nested values start so, and the validator of
        their type waits until a value of it is given."""
        made = object.__new__(cls)
        for f in fields(cls):  # type: ignore[arg-type]
            factory = f.default_factory
            default = f.default if factory is MISSING else factory()
            object.__setattr__(made, f.name, default)
        return made

    def _problems(self) -> list[str]:
        """What is wrong with the fields together (each is valid alone)."""
        return []

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        """The dataclass's schema, its fields checked together after it, and every problem
        raised as one :class:`PolicyError`."""
        from pydantic_core import core_schema

        checked = core_schema.no_info_after_validator_function(_coherent, handler(source))
        return core_schema.no_info_wrap_validator_function(_as_policy_error(cls), checked)

    def __str__(self) -> str:
        """The fields as ``name=value`` pairs, as a pydantic model prints."""
        shown = (f"{f.name}={getattr(self, f.name)!r}" for f in fields(self))  # type: ignore[arg-type]
        return " ".join(shown)

    def __setattr__(self, name: str, value: object) -> None:
        """Refuse the write as a frozen pydantic model does (a ``ValidationError``)."""
        from pydantic_core import ValidationError

        raise ValidationError.from_exception_data(
            type(self).__name__, [{"type": "frozen_instance", "loc": (name,), "input": value}]
        )


def _coherent(value: _PolicyValue) -> _PolicyValue:
    problems = value._problems()
    if problems:
        raise PolicyError(f"invalid {type(value).__name__}: {'; '.join(problems)}")
    return value


def _as_policy_error(cls: type[_PolicyValue]) -> Callable[[Any, Callable[[Any], Any]], Any]:
    from pydantic_core import ValidationError

    def validate(data: Any, handler: Callable[[Any], Any]) -> Any:
        # pydantic only wraps ValueError/AssertionError, so a PolicyError raised in a check (or
        # by a nested policy's validation) passes through unchanged.
        try:
            return handler(data)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in err['loc']) or cls.__name__}: {_message(err)}"
                for err in exc.errors(include_url=False)
            )
            raise PolicyError(f"invalid {cls.__name__}: {problems}") from None

    return validate


def _message(error: ErrorDetails) -> str:
    # A dataclass's validator calls an unknown field an unexpected keyword argument; a policy
    # is data (often a JSON file), and says it as a pydantic model did.
    if error["type"] == "unexpected_keyword_argument":
        return "Extra inputs are not permitted"
    return error["msg"]


_P = TypeVar("_P", bound=type[_PolicyValue])


@dataclass_transform(kw_only_default=True, frozen_default=True, field_specifiers=(field,))
def _policy_value(cls: _P) -> _P:
    """``cls`` made a frozen :func:`~fsm_agent.values.define.record` whose constructor
    validates, and whose fields refuse writes as a pydantic model's do."""
    made = record(cls)
    made.__init__ = _PolicyValue.__init__  # type: ignore[method-assign]
    made.__setattr__ = _PolicyValue.__setattr__  # type: ignore[method-assign]
    return made


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


@_policy_value
class RetryPolicy(_PolicyValue):
    """How failed model calls are retried: exponential backoff with jitter.

    A retry happens only for errors the provider marks retryable. When the server says how long
    to wait (``Retry-After``) and ``honour_retry_after`` is set, that wait is used instead of the
    computed one; a server wait longer than ``max_delay_s`` ends the retries (the error is kept).
    """

    max_retries: Annotated[
        int, Schema(ge=0, le=_COUNT, description="retries after the first attempt")
    ] = 5
    base_delay_s: Annotated[float, Schema(ge=0, le=_DAY_S, allow_inf_nan=False)] = 1.0
    max_delay_s: Annotated[float, Schema(ge=0, le=_DAY_S, allow_inf_nan=False)] = 60.0
    jitter: Annotated[float, Schema(ge=0, le=1, allow_inf_nan=False, description="± fraction")] = (
        0.2
    )
    retryable_statuses: frozenset[int] = frozenset({408, 409, 429, 500, 502, 503, 504, 529})
    honour_retry_after: bool = True

    def _problems(self) -> list[str]:
        if self.base_delay_s > self.max_delay_s:
            return [
                f"base_delay_s ({self.base_delay_s}) must not exceed "
                f"max_delay_s ({self.max_delay_s})"
            ]
        return []


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


@_policy_value
class UsageLimits(_PolicyValue):
    """Usage caps for one run; reaching one moves the run to ``finalizing``.

    ``max_requests`` counts model-call attempts, failed and retried ones included.
    """

    max_requests: Annotated[int | None, Schema(gt=0, le=_COUNT)] = None
    max_input_tokens: Annotated[int | None, Schema(gt=0, le=_TOKENS)] = None
    max_output_tokens: Annotated[int | None, Schema(gt=0, le=_TOKENS)] = None
    max_total_tokens: Annotated[int | None, Schema(gt=0, le=_TOKENS)] = None
    max_cost_usd: Annotated[float | None, Schema(gt=0, le=1e9, allow_inf_nan=False)] = None


class CompactionStrategyName(StrEnum):
    """A built-in compaction strategy, as named in :attr:`CompactionSettings.strategies`."""

    TRIM_TOOL_OUTPUTS = "trim_tool_outputs"  # old tool outputs become a short marker [S000]
    SUMMARIZE = "summarize"  # a tools-off model call replaces the oldest part with a summary
    SLIDING_WINDOW = "sliding_window"  # the oldest call/result groups are dropped [S004]


@_policy_value
class CompactionSettings(_PolicyValue):
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

    threshold: Annotated[float, Schema(gt=0, le=1, allow_inf_nan=False)] = 0.8
    context_window: Annotated[int | None, Schema(gt=0, le=_TOKENS)] = None
    keep_recent_messages: Annotated[int, Schema(ge=1)] = 2
    target: Annotated[
        float, Schema(gt=0, le=1, allow_inf_nan=False, description="× the budget")
    ] = 0.6
    strategies: tuple[CompactionStrategyName, ...] = (
        CompactionStrategyName.TRIM_TOOL_OUTPUTS,
        CompactionStrategyName.SLIDING_WINDOW,
    )
    max_messages: Annotated[int | None, Schema(ge=2, description="message-count window")] = None
    trim_tool_outputs_over: Annotated[int, Schema(ge=0, description="characters")] = 200
    summary_max_tokens: Annotated[int, Schema(gt=0, le=_TOKENS)] = 1024
    summary_prompt: Annotated[
        str | None, Schema(description="replaces the built-in instructions")
    ] = None
    use_reported_usage: bool = True

    def _problems(self) -> list[str]:
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
        return problems


@_policy_value
class ToolOutputSettings(_PolicyValue):
    """How much of a tool's output goes into the history.

    A result longer than ``max_chars`` is cut to that length with a marker; its full text stays
    in the run's store (:attr:`RunState.tool_outputs`), which the model pages through with the
    built-in ``read_tool_output`` tool. With ``keep_recent`` set, before each model call every
    tool result older than the ``keep_recent`` newest is cut to ``old_max_chars`` the same way
    (``trimToolOutputs``). ``max_chars=None`` keeps outputs whole.
    """

    max_chars: Annotated[int | None, Schema(ge=1_000, description="per result in the history")] = (
        50_000
    )
    keep_recent: Annotated[int | None, Schema(ge=0, description="tool results kept whole")] = None
    old_max_chars: Annotated[int, Schema(ge=0, description="older results are cut to this")] = 1_000


@_policy_value
class Policy(_PolicyValue):
    """Every limit of a run. Policies are data: they validate, serialise and print.

    Stop conditions are code, not data, so they are given to the :class:`~fsm_agent.Agent`.
    """

    max_steps: Annotated[
        int | None, Schema(gt=0, le=_COUNT, description="successful model turns per run")
    ] = 200
    retry: RetryPolicy = field(default_factory=RetryPolicy._defaults)
    max_consecutive_errors: Annotated[
        int, Schema(gt=0, le=_COUNT, description="failed tool turns in a row")
    ] = 3
    max_total_errors: Annotated[
        int | None, Schema(gt=0, le=_COUNT, description="model errors + failed turns")
    ] = None
    max_compaction_attempts: Annotated[int, Schema(ge=0, le=_COUNT)] = 3
    max_verifications: Annotated[
        int, Schema(ge=0, le=_COUNT, description="rejections sent back to the model")
    ] = 3
    max_continuations: Annotated[
        int,
        Schema(
            ge=0, le=_COUNT, description="continuation turns after answers cut by the output cap"
        ),
    ] = 1
    require_done_tool: bool = False
    tool_timeout_s: Annotated[float, Schema(gt=0, le=_DAY_S, allow_inf_nan=False)] = 30.0
    tool_failure_mode: ToolFailureMode = ToolFailureMode.CONTINUE
    parallel_tool_calls: bool = True
    max_tool_calls: Annotated[
        int | None, Schema(gt=0, le=_COUNT, description="tool executions per run")
    ] = None
    max_wall_clock_s: Annotated[
        float | None,
        Schema(
            gt=0,
            le=_MONTH_S,
            allow_inf_nan=False,
            description="seconds of active running per run, summed over resumes (a suspended "
            "run's wait does not count)",
        ),
    ] = None
    usage_limits: UsageLimits = field(default_factory=UsageLimits._defaults)
    compaction: CompactionSettings = field(default_factory=CompactionSettings._defaults)
    summarize_on_max_steps: bool = True
    tool_output: ToolOutputSettings = field(default_factory=ToolOutputSettings._defaults)
    hook_timeout_s: Annotated[
        float, Schema(gt=0, le=_DAY_S, allow_inf_nan=False, description="per hook call")
    ] = 10.0
    hook_failure_mode: HookFailureMode = HookFailureMode.CONTINUE
    max_repeated_tool_calls: Annotated[
        int | None,
        Schema(ge=2, le=_COUNT, description="loop guard: the same calls this many times in a row"),
    ] = None
    on_repeated_tool_calls: LoopGuardAction = LoopGuardAction.WARN
    max_handoffs: Annotated[
        int | None,
        Schema(
            ge=0,
            le=_COUNT,
            description="handoffs per run (None: each spends its turn's step, so max_steps "
            "bounds them)",
        ),
    ] = None

    def _problems(self) -> list[str]:
        if (
            self.max_steps is None
            and self.max_wall_clock_s is None
            and self.usage_limits.max_requests is None
        ):
            return [
                "max_steps=None leaves the run unbounded: set max_steps, "
                "max_wall_clock_s or usage_limits.max_requests"
            ]
        return []


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
