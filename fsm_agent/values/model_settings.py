"""Model settings: the sampling and tool-use knobs of a model call, set on the agent, on a run,
or by a ``before_model_call`` hook.

:class:`ModelSettings` is validated where it is built. Settings are merged agent → run → hook,
field by field, the later winning: a field left ``None`` keeps the earlier value. The merged
settings go out on every :class:`~fsm_agent.ModelRequest` (its ``max_tokens``, ``temperature``,
``top_p``, ``seed``, ``stop_sequences``, ``tool_choice``, ``parallel_tool_calls`` and reasoning
fields), where each provider maps them to its wire format (see ``docs/providers.md``).

What the machine needs comes first:

- ``tool_choice`` goes out only on requests that offer tools, and a tool's name only when the
  request offers that tool (a phase without it gets the provider's default);
- a forcing choice (``"required"`` or a tool's name) holds for the run's first model turn only,
  then the model chooses again, so that the run can end with an answer;
- the step-limit summary call sends no tools (``tool_choice="none"``) whatever the settings;
- ``parallel_tool_calls`` defaults to the policy's ``parallel_tool_calls``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import fields, replace
from typing import Any, Literal

from ..errors import ConfigurationError
from .define import record
from .messages import ModelRequest, OutputSchema, ToolChoice, ToolDefinition

__all__ = ["ModelSettings", "merge_settings", "settings_request", "summary_settings"]

_FREE = frozenset({"auto", "none"})  # the tool choices that force no call
_EFFORTS = ("low", "medium", "high")


@record
class ModelSettings:
    """Sampling and tool-use settings of model calls; ``None`` leaves a field to the layer
    before (agent → run → hook) and, at the end, to the provider's default.

    ``max_tokens`` caps the output; ``temperature`` (0 or more) and ``top_p`` (above 0, at most
    1) shape sampling; ``seed`` asks for reproducible sampling where the provider supports it;
    ``stop_sequences`` end the output (a single string is one sequence); ``tool_choice`` is
    ``"auto"``, ``"none"``, ``"required"`` or a tool's name; ``parallel_tool_calls`` lets the
    model ask for several calls in one turn; ``reasoning_effort`` and
    ``reasoning_budget_tokens`` turn on the model's reasoning. Raises
    :class:`~fsm_agent.ConfigurationError` for a value of the wrong type or out of range.
    """

    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None
    stop_sequences: Sequence[str] | None = None
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool | None = None
    reasoning_effort: Literal["low", "medium", "high"] | None = None
    reasoning_budget_tokens: int | None = None

    def __post_init__(self) -> None:
        _check_count("max_tokens", self.max_tokens)
        _check_count("reasoning_budget_tokens", self.reasoning_budget_tokens)
        _check_number("temperature", self.temperature, above=False, at_most=None)
        _check_number("top_p", self.top_p, above=True, at_most=1.0)
        if self.seed is not None and (type(self.seed) is not int):
            raise ConfigurationError(f"seed must be an int, got {self.seed!r}")
        stop = self.stop_sequences
        if isinstance(stop, str):
            stop = (stop,)
        if stop is not None:
            if not isinstance(stop, Sequence) or not all(isinstance(s, str) and s for s in stop):
                raise ConfigurationError(
                    f"stop_sequences must be a list of non-empty strings, got {stop!r}"
                )
            object.__setattr__(self, "stop_sequences", tuple(stop))
        choice = self.tool_choice
        if choice is not None and (not isinstance(choice, str) or not choice):
            raise ConfigurationError(
                f"tool_choice must be 'auto', 'none', 'required' or a tool's name, got {choice!r}"
            )
        if self.parallel_tool_calls is not None and not isinstance(self.parallel_tool_calls, bool):
            raise ConfigurationError(
                f"parallel_tool_calls must be True or False, got {self.parallel_tool_calls!r}"
            )
        if self.reasoning_effort is not None and self.reasoning_effort not in _EFFORTS:
            raise ConfigurationError(
                f"reasoning_effort must be 'low', 'medium' or 'high', got {self.reasoning_effort!r}"
            )

    def merged(self, later: ModelSettings | None) -> ModelSettings:
        """These settings with every field that ``later`` sets taking its value."""
        if later is None:
            return self
        changes = {
            f.name: value for f in fields(later) if (value := getattr(later, f.name)) is not None
        }
        return replace(self, **changes) if changes else self

    def apply(self, request: ModelRequest) -> ModelRequest:
        """``request`` with every field these settings set (what a ``before_model_call`` hook
        returns to change a call's settings)."""
        changes: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is not None:
                changes[f.name] = value
        return request.model_copy(update=changes) if changes else request

    @classmethod
    def of(cls, request: ModelRequest) -> ModelSettings:
        """The settings ``request`` carries."""
        return cls(
            max_tokens=request.max_tokens,
            temperature=request.temperature,
            top_p=request.top_p,
            seed=request.seed,
            stop_sequences=request.stop_sequences or None,
            tool_choice=request.tool_choice,
            parallel_tool_calls=request.parallel_tool_calls,
            reasoning_effort=request.reasoning_effort,
            reasoning_budget_tokens=request.reasoning_budget_tokens,
        )


def _check_count(name: str, value: object) -> None:
    if value is not None and (type(value) is not int or value <= 0):
        raise ConfigurationError(f"{name} must be a whole number above 0, got {value!r}")


def _check_number(name: str, value: object, *, above: bool, at_most: float | None) -> None:
    if value is None:
        return
    ok = False
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        ok = (value > 0 if above else value >= 0) and (at_most is None or value <= at_most)
    if not ok:
        bound = "above 0" if above else "0 or more"
        if at_most is not None:
            bound += f" and at most {at_most:g}"
        raise ConfigurationError(f"{name} must be a finite number {bound}, got {value!r}")


def merge_settings(*layers: ModelSettings | None) -> ModelSettings | None:
    """The settings of ``layers`` merged in order, the later winning field by field; ``None``
    when no layer sets anything. Raises :class:`~fsm_agent.ConfigurationError` for a layer
    that is not a :class:`ModelSettings`."""
    merged: ModelSettings | None = None
    for layer in layers:
        if layer is None:
            continue
        if not isinstance(layer, ModelSettings):
            raise ConfigurationError(
                f"model_settings must be a fsm_agent.ModelSettings, got {type(layer).__name__}"
            )
        merged = layer if merged is None else merged.merged(layer)
    return merged


def settings_request(
    settings: ModelSettings,
    messages: tuple[Any, ...],
    tools: tuple[ToolDefinition, ...],
    *,
    parallel_tool_calls: bool,
    first_turn: bool,
    output: OutputSchema | None,
) -> ModelRequest:
    """The request of a main-loop call under ``settings`` (see the module's rules for
    ``tool_choice``); ``parallel_tool_calls`` is the policy's value, used when the settings
    leave it unset; ``first_turn`` says the run has no successful model turn yet."""
    choice = settings.tool_choice if tools else None
    if (
        choice is not None
        and choice not in _FREE
        and (not first_turn or (choice != "required" and all(t.name != choice for t in tools)))
    ):
        choice = None  # forcing: the first turn only, and a named tool only when offered
    parallel = settings.parallel_tool_calls
    if tools and parallel is None:
        parallel = parallel_tool_calls
    return ModelRequest(
        messages=messages,
        tools=tools,
        tool_choice=choice,
        parallel_tool_calls=parallel if tools else None,
        **_sampling(settings),
        output=output,
    )


def summary_settings(settings: ModelSettings | None) -> Mapping[str, Any]:
    """The request fields of the step-limit summary call under ``settings``: sampling as set
    (none: the request's defaults), never a tool choice (the call sends no tools)."""
    return {} if settings is None else _sampling(settings)


def _sampling(settings: ModelSettings) -> dict[str, Any]:
    """The request's sampling fields as ``settings`` sets them."""
    return {
        "max_tokens": settings.max_tokens,
        "temperature": settings.temperature,
        "top_p": settings.top_p,
        "seed": settings.seed,
        "stop_sequences": settings.stop_sequences or (),
        "reasoning_effort": settings.reasoning_effort,
        "reasoning_budget_tokens": settings.reasoning_budget_tokens,
    }
