"""Fallback models: each move down the chain is a row of the table, an event, a bounded call,
and a journal entry that names the model; under scripted models, httpx.MockTransport and the
loopback OpenAI-compatible server answering 429 and 503."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from fsm_agent import (
    Agent,
    Approval,
    AuthenticationError,
    ConfigurationError,
    ContextWindowExceededError,
    FallbackModel,
    ModelChain,
    ModelTimeoutError,
    OpenAIChatModel,
    Outcome,
    Policy,
    ProviderServerError,
    RateLimitError,
    RetryPolicy,
    Runtime,
    SQLiteCheckpointer,
    State,
    StopReason,
    tool,
)
from fsm_agent.diagrams import Scope, plan
from fsm_agent.events import ModelSwitchedEvent, StateChangedEvent
from fsm_agent.fuzzing import FuzzCase, check_case
from fsm_agent.fuzzing.decoding import Choices, read_case
from fsm_agent.machine.bounds import bounds
from fsm_agent.machine.table import TABLE, Counter
from fsm_agent.messages import Message, ModelRequest
from fsm_agent.replay import record, replay
from fsm_agent.testing import ScriptedModel, Turn, VirtualClock, fail, text, tool_call
from helpers import stream
from provider_server import FAST, ProviderServer, json_reply, openai_json
from provider_server import Turn as WireTurn

_SWITCH_ROWS = {
    i
    for i, row in enumerate(TABLE)
    if any(u.counter is Counter.MODEL_SWITCHES for u in row.updates)
}
_REQUEST = ModelRequest(messages=(Message.user("hi"),))


def _agent(*models: ScriptedModel, policy: Policy | None = None, **chain: Any) -> Agent[Any, Any]:
    clock = VirtualClock()
    return Agent(
        FallbackModel(*models, **chain),
        policy=policy or Policy(max_steps=5),
        runtime=Runtime(sleep=clock.sleep, clock=clock.now),
    )


@tool
def look(q: str) -> str:
    """Look something up."""
    return f"seen {q}"


def _model(name: str, *turns: Turn) -> ScriptedModel:
    return ScriptedModel(list(turns), name=name)


def test_a_rate_limited_primary_hands_the_call_to_the_next_model_as_a_move_and_an_event() -> None:
    """A 429 on the primary is the outcome ``fallback``: the row moves calling → calling with
    model_switches += 1, the stream says which model took the call, the next model answers."""
    primary = _model("primary", fail(RateLimitError("429 slow down", status_code=429)))
    backup = _model("backup", text("from backup"))
    events, result = stream(_agent(primary, backup))
    assert result.ok and result.output == "from backup"
    switch = next(m for m in result.trace if m.outcome is Outcome.FALLBACK)
    assert (switch.source, switch.dest) == (State.CALLING, State.CALLING)
    assert switch.row in _SWITCH_ROWS and switch.counters.model_switches == 1
    assert result.counters.model_switches == 1 and result.counters.retries == 0
    (switched,) = [e for e in events if isinstance(e, ModelSwitchedEvent)]
    assert (switched.from_model, switched.to_model, switched.switches) == (
        "primary",
        "backup",
        1,
    )
    assert "429 slow down" in switched.error
    moved = [e for e in events if isinstance(e, StateChangedEvent)]
    assert moved[
        moved.index(next(e for e in moved if e.outcome is Outcome.FALLBACK)) + 1
    ].source is (State.CALLING)
    assert (primary.calls, backup.calls) == (1, 1)
    assert result.run_state is not None and result.run_state.answered_by == {"backup": 1}


def test_retries_are_spent_on_a_model_before_the_next_one_takes_the_call() -> None:
    """An error that is retryable but not in ``on`` is retried max_retries times; then the row
    ``retryable_error [model_switches < …]`` moves on, with a fresh retry budget."""
    policy = Policy(max_steps=5, retry=RetryPolicy(max_retries=2))
    server_error = ProviderServerError("503 unavailable", status_code=503)
    primary = _model("primary", *[fail(server_error)] * 3)
    backup = _model("backup", fail(server_error), text("ok"))
    _, result = stream(_agent(primary, backup, policy=policy, on=(RateLimitError,)))
    assert result.ok and result.output == "ok"
    assert (primary.calls, backup.calls) == (3, 2)
    outcomes = [m.outcome for m in result.trace if m.source is State.CALLING]
    assert outcomes == [Outcome.RETRYABLE_ERROR] * 4 + [Outcome.STOP]
    assert [m.row in _SWITCH_ROWS for m in result.trace[2:6]] == [False, False, True, False]


def test_the_last_model_retries_an_error_of_on_and_then_the_run_aborts_within_the_bound() -> None:
    """At the end of the chain an error in ``on`` is retried like any retryable error; when every
    model keeps failing the run aborts with max_errors after exactly the calls the bound
    allows for one turn."""
    policy = Policy(max_steps=1, retry=RetryPolicy(max_retries=2), summarize_on_max_steps=False)
    limited = fail(RateLimitError("429", status_code=429))
    models = [_model(name, *[limited] * 10) for name in ("a", "b", "c")]
    _, result = stream(_agent(*models, policy=policy))
    assert result.stop_reason is StopReason.MAX_ERRORS
    assert [m.calls for m in models] == [1, 1, 3]
    assert result.counters.model_switches == 2
    # the bound for one turn: 1 turn + (1 + 2 switches) × 2 retries + 2 switches = 9 calls;
    # this chain switches at once (429 is in on=), so it makes 2 switches, then 2 retries and
    # the call that aborts on the last model
    assert result.model_calls == 5
    assert bounds(policy, models=3).max_model_calls == 9


def test_a_fatal_error_outside_on_aborts_without_switching() -> None:
    """An authentication error is not a reason to move on by default: the run aborts."""
    primary = _model("primary", fail(AuthenticationError("bad key", status_code=401)))
    backup = _model("backup", text("never"))
    _, result = stream(_agent(primary, backup))
    assert result.stop_reason is StopReason.MODEL_ERROR
    assert backup.calls == 0 and result.counters.model_switches == 0


def test_on_can_name_a_fatal_error_type() -> None:
    """``on=(AuthenticationError,)`` moves to the next model on a revoked key."""
    primary = _model("primary", fail(AuthenticationError("revoked", status_code=401)))
    backup = _model("backup", text("fine"))
    _, result = stream(_agent(primary, backup, on=(AuthenticationError,)))
    assert result.ok and result.output == "fine"


def test_the_chain_stays_on_the_model_it_moved_to_for_later_turns() -> None:
    """A run never moves back up: after the switch every call goes to the backup."""

    clock = VirtualClock()
    primary = _model("primary", fail(ModelTimeoutError("timed out")))
    backup = _model("backup", tool_call("look", {"q": "x"}), text("done"))
    agent = Agent(
        FallbackModel(primary, backup),
        tools=[look],
        runtime=Runtime(sleep=clock.sleep, clock=clock.now),
    )
    result = agent.run_sync("go")
    assert result.ok and (primary.calls, backup.calls) == (1, 2)
    assert clock.now() == 0.0  # a switch does not back off


def test_a_context_overflow_is_compaction_s_case_not_the_next_model_s() -> None:
    """``on`` refuses ContextWindowExceededError, and the chain needs two models and Model
    error types."""
    one = _model("one")
    with pytest.raises(ConfigurationError, match="ContextWindowExceededError"):
        FallbackModel(one, one, on=(ContextWindowExceededError,))
    with pytest.raises(ConfigurationError, match="at least two models"):
        FallbackModel(one)
    with pytest.raises(ConfigurationError, match="ModelError subclasses"):
        FallbackModel(one, one, on=(ValueError,))  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match=r"fsm_agent\.Model"):
        FallbackModel(one, "gpt")  # type: ignore[arg-type]
    chain = FallbackModel(_model("a"), ScriptedModel([], name="b", context_window=8000))
    assert isinstance(chain, ModelChain)
    assert chain.name == "fallback(a, b)" and chain.context_window == 8000


def test_on_takes_one_error_class_or_an_iterable_of_them() -> None:
    """``on=RateLimitError`` reads as ``on=(RateLimitError,)``; anything else that is neither
    an error class nor an iterable of them is a ``ConfigurationError``, never a bare
    ``TypeError``."""
    one = _model("one")
    assert FallbackModel(one, one, on=RateLimitError).on == (RateLimitError,)
    assert FallbackModel(one, one, on=[RateLimitError]).on == (RateLimitError,)
    for bad in (5, None, [None], ValueError, "RateLimitError"):
        with pytest.raises(ConfigurationError, match="ModelError subclass"):
            FallbackModel(one, one, on=bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="ContextWindowExceededError"):
        FallbackModel(one, one, on=ContextWindowExceededError)


def test_called_on_its_own_the_chain_tries_its_models_in_order() -> None:
    """Outside an agent, ``complete`` and ``stream`` move down the chain on an error of ``on``
    and raise any other error, or the last model's."""
    limited = fail(RateLimitError("429"))

    async def main() -> None:
        chain = FallbackModel(_model("a", limited), _model("b", text("b says")))
        assert (await chain.complete(_REQUEST)).message.text == "b says"
        chain = FallbackModel(_model("a", limited, limited), _model("b", text("streamed b")))
        items = [item async for item in chain.stream(_REQUEST)]
        assert items[-1].message.text == "streamed b"  # type: ignore[union-attr]
        chain = FallbackModel(_model("a", limited), _model("b", limited))
        with pytest.raises(RateLimitError):
            await chain.complete(_REQUEST)
        chain = FallbackModel(_model("a", fail(AuthenticationError("no"))), _model("b"))
        with pytest.raises(AuthenticationError):
            await chain.complete(_REQUEST)

    asyncio.run(main())


@tool(needs_approval=True)
def pay(amount: int) -> str:
    """Pay an amount."""
    return f"paid {amount}"


def test_the_journal_names_the_model_and_the_switch_survives_checkpoint_and_resume(
    tmp_path: Path,
) -> None:
    """The journal records which model made each call; a run that moved to the backup and
    then suspended resumes, in a fresh agent, on the backup (model_switches is checkpointed)."""
    store = SQLiteCheckpointer(tmp_path / "runs.db")
    primary = _model("primary", fail(ProviderServerError("502", status_code=502)))
    backup = _model("backup", tool_call("pay", {"amount": 3}, id="p1"))
    clock = VirtualClock()
    runtime = Runtime(sleep=clock.sleep, clock=clock.now)
    chain = FallbackModel(primary, backup)
    suspended = Agent(chain, tools=[pay], checkpointer=store, runtime=runtime).run_sync("pay 3")
    assert suspended.state is State.SUSPENDED and suspended.counters.model_switches == 1
    journal = {
        key: json.loads(r.result or "{}") for key, r in store.effects(suspended.run_id).items()
    }
    made_by = sorted((key, entry["model"]) for key, entry in journal.items() if "model" in entry)
    assert made_by == [("1/model/1", "primary"), ("1/model/2", "backup")]
    assert "error" in journal["1/model/1"] and "response" in journal["1/model/2"]

    fresh_primary = _model("primary", text("the primary must not be asked again"))
    fresh_backup = _model("backup", text("paid, says the backup"))
    agent = Agent(
        FallbackModel(fresh_primary, fresh_backup), tools=[pay], checkpointer=store, runtime=runtime
    )
    done = asyncio.run(agent.resume(suspended.run_id, {"p1": Approval.allow()}))
    assert done.ok and done.output == "paid, says the backup"
    assert (fresh_primary.calls, fresh_backup.calls) == (0, 1)
    assert done.run_state is not None and done.run_state.answered_by == {"backup": 2}


def _openai(model: str, client: httpx.AsyncClient, base_url: str = "http://test/v1") -> Any:
    return OpenAIChatModel(
        model, api_key="sk-test", base_url=base_url, client=client, timeouts=FAST
    )


def test_under_httpx_mock_transport_a_429_model_gives_way_to_the_next() -> None:
    """Real provider models on a mocked transport: the 429 of one model name is a fallback,
    the other model name answers 200."""
    asked: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        name = json.loads(request.content)["model"]
        asked.append(name)
        if name == "busy-model":
            return httpx.Response(429, json={"error": {"message": "rate limited"}})
        return httpx.Response(200, json=openai_json(WireTurn(text="hello from spare"), model=name))

    async def main() -> Any:
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            chain = FallbackModel(_openai("busy-model", client), _openai("spare-model", client))
            return await Agent(chain, policy=Policy(max_steps=3)).run("hi")

    result = asyncio.run(main())
    assert result.ok and result.output == "hello from spare"
    assert asked == ["busy-model", "spare-model"]


def test_under_the_loopback_server_429_and_503_fall_back_to_the_model_that_answers_200() -> None:
    """The OpenAI-compatible loopback server answers 429 for the primary and 503 for the second
    model: each is a move down the chain (one ``fallback`` row each), and the third answers."""

    def handler(request: Any) -> Any:
        name = request.json["model"]
        if name == "primary":
            return json_reply({"error": {"message": "slow down"}}, status=429)
        if name == "second":
            return json_reply({"error": {"message": "overloaded"}}, status=503)
        return json_reply(openai_json(WireTurn(text="third answers"), model=name))

    async def main() -> tuple[Any, list[Any]]:
        async with ProviderServer(handler) as server, httpx.AsyncClient() as client:
            url = f"{server.url}/v1"
            chain = FallbackModel(
                _openai("primary", client, url),
                _openai("second", client, url),
                _openai("third", client, url),
            )
            events = [e async for e in Agent(chain, policy=Policy(max_steps=3)).run_stream("hi")]
            return events, [r.json["model"] for r in server.requests]

    events, asked = asyncio.run(main())
    assert asked == ["primary", "second", "third"]
    assert events[-1].type == "final" and events[-1].output == "third answers"  # type: ignore[union-attr]
    switched = [(e.from_model, e.to_model) for e in events if isinstance(e, ModelSwitchedEvent)]
    assert switched == [("openai:primary", "openai:second"), ("openai:second", "openai:third")]
    fallbacks = [
        e for e in events if isinstance(e, StateChangedEvent) and e.outcome is Outcome.FALLBACK
    ]
    assert len(fallbacks) == 2 and all(e.row in _SWITCH_ROWS for e in fallbacks)


def test_a_fuzz_case_can_run_on_a_chain_whose_primary_fails() -> None:
    """The fuzzer generates cases with ``fallback``: the default agent's model is a chain whose
    primary is rate-limited; every invariant holds, counting the primary's calls, within the
    bound for a chain of two."""
    case = FuzzCase(
        script=(tool_call("add", {"a": 1, "b": 2}), text("3")),
        policy=Policy(max_steps=3),
        fallback=True,
    )
    record = check_case(case)
    assert record.result.ok and record.result.output == "3"
    assert record.result.counters.model_switches == 1
    assert record.result.model_calls == 3 == len(record.model.requests)
    assert record.bounds.max_model_calls == bounds(Policy(max_steps=3), models=2).max_model_calls
    assert "fallback=True" in case.source()
    assert any(read_case(Choices(bytes([i] * 64))).fallback for i in range(256))


def test_a_diagram_for_a_chain_draws_the_switch_rows_live() -> None:
    """A policy's drawing with ``models=2`` labels the switch rows with the chain's limit and
    keeps them live; with one model the ``fallback`` rows are greyed (never reported)."""
    chain = plan(scope=Scope.of(Policy(), models=2))
    single = plan(scope=Scope.of(Policy()))
    fallback_rows = [i for i, row in enumerate(TABLE) if row.outcome is Outcome.FALLBACK]
    assert all(chain.edges[i].reachable for i in fallback_rows)
    assert not any(single.edges[i].reachable for i in fallback_rows)
    assert chain.edges[fallback_rows[0]].label == "1. fallback [model_switches < 1]"


def test_the_step_limit_summary_call_goes_to_the_model_the_run_moved_to() -> None:
    """Calls outside ``calling`` (here the tools-off summary at the step limit) use the current
    model of the chain, not the primary that failed."""

    clock = VirtualClock()
    primary = _model("primary", fail(RateLimitError("429")))
    backup = _model("backup", tool_call("look", {"q": "x"}), text("the summary"))
    agent = Agent(
        FallbackModel(primary, backup),
        tools=[look],
        policy=Policy(max_steps=1, summarize_on_max_steps=True),
        runtime=Runtime(sleep=clock.sleep, clock=clock.now),
    )
    result = agent.run_sync("go")
    assert result.stop_reason is StopReason.MAX_STEPS and result.output == "the summary"
    assert (primary.calls, backup.calls) == (1, 2)


def test_an_effect_adapter_that_replaces_the_chain_makes_the_agent_single_model() -> None:
    """``with_effects(model=...)`` with a plain model gives an agent whose guards read one
    model (no switch row can fire); with another chain, that chain's length."""
    agent = _agent(_model("a"), _model("b"), _model("c"))
    assert agent._plan.limits.max_model_switches == 2
    plain = agent.with_effects(model=_model("wrapped", text("hi")))
    assert plain._plan.limits.max_model_switches == 0 and plain._plan.models == (plain.model,)
    assert plain.run_sync("hi").output == "hi"
    rechained = agent.with_effects(model=FallbackModel(_model("x"), _model("y")))
    assert rechained._plan.limits.max_model_switches == 1 and len(rechained._plan.models) == 2


def test_a_recorded_run_that_moved_down_the_chain_replays_without_divergence(
    tmp_path: Path,
) -> None:
    """Replay rebuilds the chain the run moved through (by the recorded names) and hands the
    recorded fallback errors on, so the replayed moves and events equal the recorded ones."""
    policy = Policy(max_steps=3, retry=RetryPolicy(max_retries=1))
    server_error = ProviderServerError("503", status_code=503)
    primary = _model("primary", fail(RateLimitError("429 busy", status_code=429)))
    second = _model("second", fail(server_error), fail(server_error))
    third = _model("third", fail(server_error), text("third answers"))
    path = tmp_path / "run.jsonl"
    recorded = asyncio.run(
        record(_agent(primary, second, third, policy=policy, on=(RateLimitError,)), "hi", path)
    )
    assert recorded.ok and recorded.counters.model_switches == 2
    report = asyncio.run(replay(path))
    assert report.ok, report.divergence
    switched = [e for e in report.events if isinstance(e, ModelSwitchedEvent)]
    assert [(e.from_model, e.to_model) for e in switched] == [
        ("primary", "second"),
        ("second", "third"),
    ]
