"""Model settings: validated where they are given, merged agent → run → hook field by field,
carried on every request, and reconciled with what the machine needs (tool choice, the
step-limit summary call, phases, parallel calls)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from fsm_agent import (
    Agent,
    Approval,
    ConfigurationError,
    InMemoryCheckpointer,
    ModelRequest,
    ModelSettings,
    Policy,
    tool,
)
from fsm_agent.conversation import Conversation
from fsm_agent.testing import ScriptedModel, text, tool_call
from helpers import look


@tool
def other(topic: str = "x") -> str:
    """Another tool."""
    return topic


def _settings_of(request: ModelRequest) -> dict[str, Any]:
    settings = ModelSettings.of(request)
    return {name: getattr(settings, name) for name in settings.__slots__}


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("max_tokens", 0),
        ("max_tokens", 1.5),
        ("max_tokens", True),
        ("temperature", -0.1),
        ("temperature", float("nan")),
        ("temperature", "hot"),
        ("top_p", 0),
        ("top_p", 1.5),
        ("seed", 1.0),
        ("stop_sequences", [""]),
        ("stop_sequences", [1]),
        ("tool_choice", ""),
        ("tool_choice", 3),
        ("parallel_tool_calls", "yes"),
        ("reasoning_effort", "max"),
        ("reasoning_budget_tokens", -1),
    ],
)
def test_bad_values_are_a_configuration_error_naming_the_field(field: str, value: Any) -> None:
    """A value of the wrong type or out of range is refused when the settings are built, with
    a ConfigurationError that names the field."""
    with pytest.raises(ConfigurationError, match=field):
        ModelSettings(**{field: value})


def test_a_single_stop_string_is_one_sequence() -> None:
    """``stop_sequences="END"`` is one stop sequence, not three one-letter ones."""
    assert ModelSettings(stop_sequences="END").stop_sequences == ("END",)
    assert ModelSettings(stop_sequences=["a", "b"]).stop_sequences == ("a", "b")


def test_model_settings_must_be_model_settings() -> None:
    """A dict given as settings is refused with a ConfigurationError, on the agent and on a
    run, before anything runs."""
    model = ScriptedModel([text("hi")])
    with pytest.raises(ConfigurationError, match="ModelSettings"):
        Agent(model, model_settings={"temperature": 0})  # type: ignore[arg-type]
    agent = Agent(model)
    with pytest.raises(ConfigurationError, match="ModelSettings"):
        agent.run_sync("hi", model_settings={"temperature": 0})  # type: ignore[arg-type]
    assert model.calls == 0


def test_no_settings_leave_every_field_to_the_provider() -> None:
    """A run without settings sends requests with every setting unset (the provider's
    defaults), as before settings existed."""
    model = ScriptedModel([text("hi")])
    Agent(model).run_sync("hi")
    assert _settings_of(model.requests[0]) == dict.fromkeys(ModelSettings.__slots__)


def test_agent_run_and_hook_settings_merge_field_by_field() -> None:
    """The agent's settings, then the run's, then a ``before_model_call`` hook's, each field
    set by a later layer winning and the others kept."""

    def before_model_call(*, request: ModelRequest, **_: Any) -> ModelRequest:
        return ModelSettings(seed=7).apply(request)

    model = ScriptedModel([text("hi")])
    agent = Agent(
        model,
        model_settings=ModelSettings(max_tokens=100, temperature=0.5, top_p=0.9),
        hooks=[SimpleNamespace(before_model_call=before_model_call)],
    )
    agent.run_sync("hi", model_settings=ModelSettings(temperature=0.0, stop_sequences=["END"]))
    request = model.requests[0]
    assert (request.max_tokens, request.temperature, request.top_p) == (100, 0.0, 0.9)
    assert (request.stop_sequences, request.seed) == (("END",), 7)


def test_run_settings_apply_to_that_run_only() -> None:
    """A run's settings do not stick to the agent: the next run has the agent's again."""
    model = ScriptedModel([text("a"), text("b")])
    agent = Agent(model, model_settings=ModelSettings(temperature=1.0))
    agent.run_sync("one", model_settings=ModelSettings(temperature=0.0))
    agent.run_sync("two")
    assert [r.temperature for r in model.requests] == [0.0, 1.0]


def test_stream_and_conversation_take_run_settings() -> None:
    """``run_stream`` and a Conversation's ``run``, ``run_stream`` and ``run_sync`` pass
    their settings to the requests."""
    model = ScriptedModel([text("a"), text("b"), text("c"), text("d")])
    agent = Agent(model)

    async def streamed() -> None:
        async for _ in agent.run_stream("s", model_settings=ModelSettings(seed=1)):
            pass
        chat = Conversation(agent)
        await chat.run("x", model_settings=ModelSettings(seed=2))
        async for _ in chat.run_stream("y", model_settings=ModelSettings(seed=3)):
            pass

    asyncio.run(streamed())
    Conversation(agent).run_sync("z", model_settings=ModelSettings(seed=4))
    assert [r.seed for r in model.requests] == [1, 2, 3, 4]


def test_a_forcing_tool_choice_holds_for_the_first_turn_only() -> None:
    """``tool_choice="required"`` (or a tool's name) forces the run's first model turn; later
    turns leave the choice to the model, so the run can end with an answer."""
    for choice in ("required", "look"):
        model = ScriptedModel([tool_call("look", {}), text("done")])
        agent = Agent(model, tools=[look], model_settings=ModelSettings(tool_choice=choice))
        result = agent.run_sync("go")
        assert result.output == "done"
        assert [r.tool_choice for r in model.requests] == [choice, None]


def test_a_free_tool_choice_holds_on_every_turn() -> None:
    """``"auto"`` and ``"none"`` force nothing: they go out on every request with tools."""
    model = ScriptedModel([tool_call("look", {}), text("done")])
    Agent(model, tools=[look], model_settings=ModelSettings(tool_choice="auto")).run_sync("go")
    assert [r.tool_choice for r in model.requests] == ["auto", "auto"]


def test_no_tool_choice_without_tools_nor_for_a_tool_not_offered() -> None:
    """A request without tools carries no tool choice, and a tool's name goes out only when the
    request offers that tool (a provider rejects a choice of a tool it was not given)."""
    model = ScriptedModel([text("a"), text("b")])
    Agent(model, model_settings=ModelSettings(tool_choice="required")).run_sync("go")
    Agent(model, tools=[other], model_settings=ModelSettings(tool_choice="look")).run_sync("go")
    assert [r.tool_choice for r in model.requests] == [None, None]


def test_the_summary_call_sends_no_tools_whatever_the_settings() -> None:
    """At the step limit the summary call goes out with no tools and ``tool_choice="none"``,
    whatever the settings' tool choice, with the sampling settings kept."""
    model = ScriptedModel([tool_call("look", {}), text("summary")])
    agent = Agent(
        model,
        tools=[look],
        policy=Policy(max_steps=1),
        model_settings=ModelSettings(tool_choice="required", temperature=0.2, max_tokens=50),
    )
    assert agent.run_sync("go").output == "summary"
    summary = model.requests[-1]
    assert (summary.tools, summary.tool_choice, summary.parallel_tool_calls) == ((), "none", None)
    assert (summary.temperature, summary.max_tokens) == (0.2, 50)


def test_parallel_tool_calls_follow_the_policy_unless_set() -> None:
    """Without a setting the request's ``parallel_tool_calls`` is the policy's; a setting
    overrides it on the wire."""
    model = ScriptedModel([text("a"), text("b")])
    Agent(model, tools=[look], policy=Policy(parallel_tool_calls=False)).run_sync("go")
    agent = Agent(model, tools=[look], model_settings=ModelSettings(parallel_tool_calls=False))
    agent.run_sync("go")
    assert [r.parallel_tool_calls for r in model.requests] == [False, False]


@tool(needs_approval=True)
def risky(topic: str = "x") -> str:
    """A call a human approves."""
    return topic


@pytest.mark.parametrize("durable", [False, True], ids=["handle", "store"])
def test_resume_takes_settings(durable: bool) -> None:
    """A resumed run's calls carry the agent's settings merged with the resume's own (a run's
    settings are not saved with it)."""
    model = ScriptedModel([tool_call("risky", {}), text("done")])
    agent = Agent(
        model,
        tools=[risky],
        checkpointer=InMemoryCheckpointer() if durable else None,
        model_settings=ModelSettings(max_tokens=10),
    )
    first = agent.run_sync("go", model_settings=ModelSettings(seed=1))
    assert first.resume_handle is not None
    decisions = {first.pending[0].id: True}
    done = asyncio.run(
        agent.resume(first.resume_handle, decisions, model_settings=ModelSettings(seed=2))
    )
    assert done.output == "done"
    assert [(r.max_tokens, r.seed) for r in model.requests] == [(10, 1), (10, 2)]


def test_settings_read_back_from_a_request_apply_as_they_were() -> None:
    """``ModelSettings.of(request)`` applied to a bare request gives the same settings."""
    settings = ModelSettings(
        max_tokens=5,
        temperature=0.1,
        top_p=0.5,
        seed=3,
        stop_sequences=["x"],
        tool_choice="none",
        parallel_tool_calls=True,
        reasoning_effort="low",
        reasoning_budget_tokens=2048,
    )
    request = settings.apply(ModelRequest(messages=()))
    assert ModelSettings.of(request) == settings


@pytest.mark.parametrize(
    "settings",
    [None, ModelSettings(), ModelSettings(max_tokens=5, stop_sequences="x", tool_choice="look")],
)
def test_the_kernels_requests_equal_validated_ones(settings: ModelSettings | None) -> None:
    """The requests the kernel builds without validation, with or without settings, equal
    the same request validated (and round-tripped through JSON)."""
    model = ScriptedModel([tool_call("look", {}), text("done")])
    Agent(model, tools=[look], model_settings=settings).run_sync("go")
    for request in model.requests:
        assert request == ModelRequest.model_validate(request.model_dump())
        assert request == ModelRequest.model_validate_json(request.model_dump_json())


class _Picky(ScriptedModel):
    """A model that refuses a temperature of 0.5, and notes each request it was asked about."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.checked: list[ModelRequest] = []

    def check_request(self, request: ModelRequest) -> None:
        self.checked.append(request)
        if request.temperature == 0.5:
            raise ConfigurationError("picky: temperature=0.5 is refused")


@tool(needs_approval=True)
def wipe(path: str) -> str:
    """Delete a file."""
    return f"deleted {path}"


def test_a_models_check_request_is_asked_at_run_and_resume_start_before_anything_is_stored() -> (
    None
):
    """A model's check_request sees the run's first request under the merged settings when a
    run starts or resumes; a refusal raises before the store changes, and a model without the
    method takes every request."""
    store = InMemoryCheckpointer()
    model = _Picky([tool_call("wipe", {"path": "a.log"}), text("wiped")])
    agent = Agent(model, tools=[wipe], checkpointer=store, model_settings=ModelSettings(top_p=0.9))
    with pytest.raises(ConfigurationError, match=r"temperature=0\.5"):
        agent.run_sync("Clean up.", model_settings=ModelSettings(temperature=0.5))
    assert store.runs() == [] and model.requests == []
    waiting = agent.run_sync("Clean up.", model_settings=ModelSettings(temperature=0.2))
    (first,) = model.checked[1:]
    assert (first.temperature, first.top_p, [t.name for t in first.tools]) == (0.2, 0.9, ["wipe"])
    assert first.messages == ()
    version = store.load(waiting.run_id).version
    (call,) = waiting.pending
    decisions = {call.id: Approval.allow()}
    with pytest.raises(ConfigurationError, match=r"temperature=0\.5"):
        asyncio.run(
            agent.resume(waiting.run_id, decisions, model_settings=ModelSettings(temperature=0.5))
        )
    assert store.load(waiting.run_id).version == version
    assert asyncio.run(agent.resume(waiting.run_id, decisions)).output == "wiped"
    plain = Agent(ScriptedModel([text("ok")]), model_settings=ModelSettings(temperature=0.5))
    assert plain.run_sync("hi").output == "ok"
