"""The kernel keeps its word at the seams: approval gates, tool signals and timeouts, the
model-call boundary, parallel dispatch, interrupted tools, deep arguments and policy bounds."""

from __future__ import annotations

import asyncio
import json
import re
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from fsm_agent import (
    Agent,
    Conversation,
    InvalidInputError,
    MalformedResponseError,
    Message,
    ModelRequest,
    ModelResponse,
    Policy,
    PolicyError,
    RateLimitError,
    RetryPolicy,
    RunState,
    SchemaVersionError,
    SQLiteCheckpointer,
    State,
    StopReason,
    StoreFullError,
    StoreLockedError,
    TaskComplete,
    ToolCall,
    ToolContext,
    ToolDefinitionError,
    ToolExecutionError,
    ToolResult,
    UsageLimits,
    tool,
)
from fsm_agent.approval import Approval
from fsm_agent.events import HookErrorEvent, StepCompleteEvent, StepStartEvent, ToolResultEvent
from fsm_agent.messages import MAX_ARGUMENT_DEPTH, FinishReason, Role, validate_history
from fsm_agent.providers import AnthropicModel, OpenAIChatModel
from fsm_agent.testing import Failure, ScriptedModel, fail, text, tool_call, tool_calls
from helpers import make_agent, stream
from invariants import check_history

RAN: list[str] = []


@pytest.fixture(autouse=True)
def _forget_seam_tools_ran() -> None:
    RAN.clear()


@tool
def write(path: str) -> str:
    """Write a file."""
    RAN.append(path)
    return f"wrote {path}"


def results(messages: Any) -> list[ToolResult]:
    """Every tool result of a history, in order."""
    return [r for m in messages if m.role is Role.TOOL for r in m.tool_results]


# -- 1: the approval gate fails closed ---------------------------------------------------------
class _Raises:
    def approve_tool(self, **kw: Any) -> Approval:
        raise RuntimeError("the policy service is down")


class _Hangs:
    timeout_s = 0.01

    async def approve_tool(self, **kw: Any) -> Approval:
        await asyncio.sleep(5)
        return Approval.allow()


class _Garbage:
    def approve_tool(self, **kw: Any) -> object:
        return "yes please"


class _BadDecision:
    def approve_tool(self, **kw: Any) -> Approval:
        return Approval("maybe")  # type: ignore[arg-type]


@pytest.mark.parametrize("gate", [_Raises, _Hangs, _Garbage, _BadDecision])
@pytest.mark.parametrize("mode", ["continue", "fail"])
def test_a_failing_approval_gate_never_lets_the_call_run(gate: type, mode: str) -> None:
    """An approve_tool hook that raises, hangs or answers garbage denies the call, in every
    hook failure mode: the tool never runs and the call still gets one result."""
    agent, _, _ = make_agent(
        [tool_call("write", {"path": "/etc/passwd"}), text("ok")],
        tools=[write],
        hooks=[gate()],
        policy=Policy(hook_failure_mode=mode),
    )
    result = agent.run_sync("go")
    assert RAN == []
    check_history(result.messages)
    (only,) = results(result.messages)
    assert only.is_error and "not approved" in only.content
    expected = StopReason.HOOK_ERROR if mode == "fail" else StopReason.COMPLETED
    assert result.stop_reason is expected


# -- 12: tool signals and timeouts -------------------------------------------------------------
def test_task_complete_passes_through_a_tools_own_except_exception() -> None:
    """TaskComplete is a control-flow signal: a tool's ``except Exception`` cannot swallow it."""

    @tool
    def finish(answer: str) -> str:
        """Finish, carelessly guarded."""
        try:
            raise TaskComplete(answer)
        except Exception:
            return "swallowed"

    agent, _, _ = make_agent([tool_call("finish", {"answer": "42"}), text("no")], tools=[finish])
    result = agent.run_sync("go")
    assert (result.stop_reason, result.output) == (StopReason.DONE_TOOL, "42")


def test_ask_human_passes_through_a_tools_own_except_exception() -> None:
    """HumanInputRequired is a control-flow signal: a tool's ``except Exception`` around
    ``ctx.ask_human`` does not swallow the question."""

    @tool
    def ask(ctx: ToolContext[None], what: str) -> str:
        """Ask, carelessly guarded."""
        try:
            ctx.ask_human(what)
        except Exception:
            return "swallowed"

    agent, _, _ = make_agent([tool_call("ask", {"what": "which file?"}), text("ok")], tools=[ask])
    result = agent.run_sync("go")
    assert result.stop_reason is StopReason.SUSPENDED
    assert list(result.resume_handle.questions.values()) == ["which file?"]  # type: ignore[union-attr]


def test_a_tools_own_timeout_error_keeps_its_message() -> None:
    """A TimeoutError the tool raises itself is reported as the tool's error with its message,
    not as the timeout the kernel applies."""

    @tool
    async def fetch(url: str) -> str:
        """Fetch a page."""
        raise TimeoutError(f"upstream {url} did not answer")

    agent, _, _ = make_agent([tool_call("fetch", {"url": "x"}), text("ok")], tools=[fetch])
    (only,) = results(agent.run_sync("go").messages)
    assert only.is_error
    assert only.content == "Error: TimeoutError: upstream x did not answer"


def test_a_sync_tool_may_not_set_a_timeout_it_cannot_apply() -> None:
    """An inline sync tool cannot be cut off, so ``timeout_s`` on it is refused at definition
    (it was silently not applied)."""
    with pytest.raises(ToolDefinitionError, match="threaded=True"):

        @tool(timeout_s=1)
        def slow() -> str:
            """Block."""
            return "x"

    @tool(timeout_s=1, threaded=True)
    def fine() -> str:
        """Block in a thread."""
        return "x"

    assert fine.timeout_s == 1


def test_a_threaded_tool_cut_off_by_its_timeout_does_not_hold_run_sync() -> None:
    """``run_sync`` returns at the threaded tool's timeout, not when its thread ends."""
    release = threading.Event()

    @tool(timeout_s=0.05, threaded=True)
    def block() -> str:
        """Block until released."""
        release.wait(10)
        return "late"

    agent, _, _ = make_agent([tool_call("block", {}), text("ok")], tools=[block])
    started = time.perf_counter()
    try:
        result = agent.run_sync("go")
    finally:
        release.set()
    assert time.perf_counter() - started < 5
    (only,) = results(result.messages)
    assert only.is_error and "timed out after 0.05 s" in only.content


# -- 12: an unknown tool is a tool error -------------------------------------------------------
class _Watch:
    def before_tool(self, **kw: Any) -> None:
        return None


@pytest.mark.parametrize("hooks", [[], [_Watch()]], ids=["plain", "hooked"])
def test_an_unknown_tool_aborts_under_tool_failure_mode_fail(hooks: list[object]) -> None:
    """Under ``tool_failure_mode="fail"`` a call to an unknown tool ends the run with
    ``tool_error``, as invalid arguments do; the call keeps its one result."""
    agent, _, _ = make_agent(
        [tool_call("nope", {}), text("never")],
        tools=[write],
        hooks=hooks,
        policy=Policy(tool_failure_mode="fail"),
    )
    result = agent.run_sync("go")
    assert result.stop_reason is StopReason.TOOL_ERROR
    assert isinstance(result.error, ToolExecutionError)
    assert result.error.tool_name == "nope"
    check_history(result.messages)
    (only,) = results(result.messages)
    assert only.content == "Error: Unknown tool 'nope'"


# -- 6: a failing parallel branch cancels its siblings -----------------------------------------
def test_a_failing_parallel_branch_cancels_and_awaits_its_siblings(tmp_path: Path) -> None:
    """When one branch of a parallel turn fails (its journal write finds the store locked),
    the sibling tools are cancelled and awaited before the run ends with that error, itself,
    and every call of the turn keeps exactly one result."""
    path = tmp_path / "runs.db"
    store = SQLiteCheckpointer(path, timeout_s=0.05)
    seen: list[str] = []
    blockers: list[sqlite3.Connection] = []

    @tool
    async def lock() -> str:
        """Take the store's write lock from another connection, then answer."""
        await asyncio.sleep(0.02)  # let the sibling start first
        blocker = sqlite3.connect(path, isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")
        blockers.append(blocker)
        return "locked"

    @tool
    async def slow() -> str:
        """Work for a while."""
        try:
            await asyncio.sleep(5)
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise
        seen.append("finished")
        return "done"

    @tool
    async def quick() -> str:
        """Answer at once."""
        return "quick"

    class Keep:
        """Keeps the run state (the run raises, so no result carries it)."""

        state: RunState | None = None

        def after_tool(self, *, run_state: RunState, **kw: Any) -> None:
            Keep.state = run_state

    agent, _, _ = make_agent(
        [tool_calls(("quick", {}), ("slow", {}), ("lock", {})), text("never")],
        tools=[lock, slow, quick],
        checkpointer=store,
        hooks=[Keep()],
    )

    async def main() -> list[str]:
        with pytest.raises(StoreLockedError):
            await agent.run("go")
        # Nobody cancelled this task: the parallel turn leaves its cancel count as it found it
        # (on Python 3.11 a group whose branch failed during its exit left it at 1).
        task = asyncio.current_task()
        assert task is not None and task.cancelling() == 0
        return list(seen)  # what the sibling did before the run returned

    try:
        assert asyncio.run(main()) == ["cancelled"]
        assert Keep.state is not None
        check_history(Keep.state.messages)
        contents = {r.name: r.content for r in results(Keep.state.messages)}
        assert contents["quick"] == "quick"
        assert contents["slow"].startswith("Error: interrupted")
        assert contents["lock"].startswith("Error: interrupted")
    finally:
        for blocker in blockers:
            blocker.close()
        store.close()


# -- 11: a tool cut off while it runs ----------------------------------------------------------
@pytest.mark.parametrize("parallel", [False, True], ids=["sequential", "parallel"])
def test_a_tool_cut_off_by_the_deadline_gets_its_events_and_an_honest_result(
    parallel: bool,
) -> None:
    """A tool cut off by the deadline after it started gets its ``tool_result`` and
    ``step_complete`` events, and its result says it was interrupted, not that it did not run."""

    @tool
    async def slow() -> str:
        """Work past the deadline."""
        await asyncio.sleep(5)
        return "late"

    @tool
    async def quick() -> str:
        """Answer at once."""
        return "quick"

    turn = tool_calls(("quick", {}), ("slow", {})) if parallel else tool_call("slow", {})
    agent, _, _ = make_agent(
        [turn, text("never")],
        tools=[slow, quick],
        policy=Policy(max_wall_clock_s=0.05, parallel_tool_calls=parallel),
    )
    events, result = stream(agent)
    assert result.stop_reason is StopReason.TIMEOUT
    check_history(result.messages)
    cut = [r for r in results(result.messages) if r.name == "slow"]
    assert len(cut) == 1 and cut[0].is_error
    assert cut[0].content.startswith("Error: interrupted (deadline) while this call was running")
    sent = [e for e in events if isinstance(e, ToolResultEvent) and e.tool_name == "slow"]
    assert [e.content for e in sent] == [cut[0].content]
    completed = [e for e in events if isinstance(e, StepCompleteEvent)]
    assert cut[0].call_id in {e.call_id for e in completed}
    assert {e.call_id for e in completed} == {
        e.call_id for e in events if isinstance(e, StepStartEvent)
    }


# -- 4: the model-call boundary maps model errors only -----------------------------------------
class _FullOnce(SQLiteCheckpointer):
    """A real SQLite store whose disk is full for one write: the journal entry of the first
    model response. Every later write succeeds."""

    failed = False

    def record_result(self, run_id: str, key: str, result: str, *, version: int) -> None:
        if not self.failed and "/model/" in key:
            self.failed = True
            raise StoreFullError("the disk is full")
        super().record_result(run_id, key, result, version=version)


def test_a_store_failure_during_a_model_call_stops_the_run_with_that_error(
    tmp_path: Path,
) -> None:
    """A checkpoint store that fails while the model answers ends the run with the store's
    error, unchanged (not a model_error), and the last good checkpoint stays as it was."""
    store = _FullOnce(tmp_path / "runs.db")
    agent, _, _ = make_agent([text("hello")], checkpointer=store)
    with pytest.raises(StoreFullError):
        agent.run_sync("go")
    (summary,) = store.runs()
    assert summary.state is State.CALLING and summary.stop_reason is None
    store.close()


def test_a_bug_in_a_model_adapter_is_not_disguised_as_a_model_error() -> None:
    """A model that raises something other than a ModelError makes the run raise it, itself:
    it is not turned into a fatal model_error the retry policy reasons about."""
    with pytest.raises(KeyError, match="choices"):
        Agent(ScriptedModel([fail(KeyError("choices"))])).run_sync("go")


def test_a_retryable_model_error_is_still_an_outcome() -> None:
    """A ModelError stays an outcome: a rate limit is retried and the run completes."""
    agent, model, _ = make_agent([Failure(RateLimitError("slow down")), text("ok")])
    result = agent.run_sync("go")
    assert (result.stop_reason, result.output) == (StopReason.COMPLETED, "ok")
    assert len(model.requests) == 2


# -- 13: nothing a model sends crashes a run ---------------------------------------------------
def _nested(depth: int) -> str:
    return '{"x": ' + "[" * depth + "]" * depth + "}"


@tool
def echo(x: object) -> str:
    """Echo anything."""
    return "echoed"


@pytest.mark.parametrize("depth", [300, 5000])
@pytest.mark.parametrize("listening", [False, True], ids=["run", "run_stream"])
def test_deeply_nested_tool_arguments_get_an_error_result_and_the_run_goes_on(
    depth: int, listening: bool
) -> None:
    """Tool arguments nested hundreds or thousands of levels deep are answered with an
    is_error result the model can act on; the run completes and its history stays valid."""
    call = ToolCall.create("c1", "echo", _nested(depth))
    assert call.arguments is None
    agent, _, _ = make_agent(
        [
            ModelResponse(
                message=Message(role=Role.ASSISTANT, parts=(call,)),
                finish_reason=FinishReason.TOOL_CALLS,
            ),
            text("flat now"),
        ],
        tools=[echo],
    )
    result = stream(agent)[1] if listening else agent.run_sync("go")
    assert (result.stop_reason, result.output) == (StopReason.COMPLETED, "flat now")
    check_history(result.messages)
    (only,) = results(result.messages)
    assert only.is_error and f"deeper than {MAX_ARGUMENT_DEPTH} levels" in only.content


def _nested_dict(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth - 1):
        value = {"x": value}
    return value


@pytest.mark.parametrize("depth", [MAX_ARGUMENT_DEPTH + 1, 1_000, 20_000])
def test_deeply_nested_dict_arguments_get_an_error_result_too(depth: int) -> None:
    """Dict arguments nested past the limit (thousands of levels) build a call kept as JSON
    text only, through ``ToolCall.create`` and ``testing.tool_call``; a run answers it with an
    error result and completes."""
    call = ToolCall.create("c1", "echo", _nested_dict(depth))
    assert call.arguments is None
    assert call.arguments_json == '{"x":' * (depth - 1) + "{}" + "}" * (depth - 1)
    agent, _, _ = make_agent(
        [tool_call("echo", _nested_dict(depth)), text("flat now")], tools=[echo]
    )
    result = agent.run_sync("go")
    assert (result.stop_reason, result.output) == (StopReason.COMPLETED, "flat now")
    check_history(result.messages)
    (only,) = results(result.messages)
    assert only.is_error and f"deeper than {MAX_ARGUMENT_DEPTH} levels" in only.content


def test_deep_arguments_are_written_as_json_writes_them() -> None:
    """Past the limit, the arguments' text is what ``json.dumps`` gives at a depth it can
    write: escapes, non-string keys, lists, tuples and scalars included."""
    leaf: Any = {"s": 'q"\\n\u00e9', 1: [1.5, True, None, (2, "t")], None: False}
    value: Any = leaf
    for _ in range(MAX_ARGUMENT_DEPTH):
        value = {"k": [value, {}]}
    call = ToolCall.create("c", "n", value)
    assert call.arguments is None
    assert call.arguments_json == json.dumps(value, separators=(",", ":"))


def test_cyclic_arguments_are_refused_with_a_typed_error() -> None:
    """Arguments that contain themselves cannot be written as JSON: a clear typed error."""
    cyclic: dict[str, Any] = {}
    cyclic["self"] = [cyclic]
    with pytest.raises(InvalidInputError, match="contain themselves"):
        ToolCall.create("c", "n", cyclic)


def test_shallow_arguments_are_parsed_as_before() -> None:
    """Arguments within the depth limit are parsed; brackets inside strings do not count."""
    deep_text = '{"s": "' + "[" * 500 + '", "x": ' + "[" * 10 + "]" * 10 + "}"
    assert ToolCall.create("c", "n", deep_text).arguments == {
        "s": "[" * 500,
        "x": [[[[[[[[[[]]]]]]]]]],
    }
    limit = '{"x": ' + "[" * (MAX_ARGUMENT_DEPTH - 1) + "]" * (MAX_ARGUMENT_DEPTH - 1) + "}"
    assert ToolCall.create("c", "n", limit).arguments is not None
    over = '{"x": ' + "[" * MAX_ARGUMENT_DEPTH + "]" * MAX_ARGUMENT_DEPTH + "}"
    assert ToolCall.create("c", "n", over).arguments is None


def _openai_body(arguments: str) -> bytes:
    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "echo", "arguments": arguments}}
        ],
    }
    body = {
        "id": "r1",
        "model": "m",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": message}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }
    return json.dumps(body).encode()


def _anthropic_body(depth: int) -> bytes:
    head = (
        '{"id": "m1", "type": "message", "role": "assistant", "model": "c", "content": '
        '[{"type": "tool_use", "id": "t1", "name": "echo", "input": '
    )
    tail = '}], "stop_reason": "tool_use", "usage": {"input_tokens": 1, "output_tokens": 1}}'
    return (head + _nested(depth) + tail).encode()


def _complete(model_of: Any, body: bytes) -> ModelResponse:
    async def main() -> ModelResponse:
        def handler(request: httpx.Request) -> httpx.Response:
            return httpx.Response(200, content=body, headers={"content-type": "application/json"})

        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            model = model_of(client)
            response: ModelResponse = await model.complete(
                ModelRequest(messages=(Message.user("hi"),))
            )
            return response

    return asyncio.run(main())


@pytest.mark.parametrize("depth", [300, 5000])
def test_an_openai_response_with_deep_arguments_keeps_them_as_raw_text(depth: int) -> None:
    """A chat completion whose tool-call arguments nest too deep decodes: the call keeps the
    raw text and no parsed arguments (no RecursionError, no validation error)."""
    response = _complete(
        lambda client: OpenAIChatModel(
            "m", base_url="http://127.0.0.1:9", client=client, api_key="k"
        ),
        _openai_body(_nested(depth)),
    )
    (call,) = response.message.tool_calls
    assert call.arguments is None and call.arguments_json == _nested(depth)


def test_an_anthropic_response_with_deep_input_keeps_it_as_raw_text() -> None:
    """A tool_use block whose input nests too deep (but parses) becomes a call with no parsed
    arguments, which the kernel answers with an error result."""
    response = _complete(
        lambda client: AnthropicModel(
            "c", base_url="http://127.0.0.1:9", client=client, api_key="k"
        ),
        _anthropic_body(300),
    )
    (call,) = response.message.tool_calls
    assert call.arguments is None


def test_a_response_body_nested_past_the_parser_is_a_malformed_response() -> None:
    """A body nested deeper than JSON can be decoded is a MalformedResponseError (a typed
    model error the retry policy handles), not a RecursionError escaping the provider."""
    with pytest.raises(MalformedResponseError):
        _complete(
            lambda client: AnthropicModel(
                "c", base_url="http://127.0.0.1:9", client=client, api_key="k"
            ),
            _anthropic_body(5000),
        )


# -- 13: a policy's numbers are bounded --------------------------------------------------------
@pytest.mark.parametrize(
    ("build", "field"),
    [
        (lambda: RetryPolicy(max_retries=10**30), "max_retries"),
        (lambda: RetryPolicy(max_delay_s=1e300), "max_delay_s"),
        (lambda: Policy(max_steps=10**30), "max_steps"),
        (lambda: Policy(max_total_errors=10**30), "max_total_errors"),
        (lambda: Policy(max_tool_calls=10**30), "max_tool_calls"),
        (lambda: Policy(tool_timeout_s=1e300), "tool_timeout_s"),
        (lambda: Policy(max_wall_clock_s=1e300), "max_wall_clock_s"),
        (lambda: Policy(usage_limits=UsageLimits(max_requests=10**30)), "max_requests"),
    ],
)
def test_a_policy_refuses_numbers_no_run_could_reach(build: Any, field: str) -> None:
    """A count or a duration past any meaningful bound (a retry budget of 10**30) is a
    PolicyError naming the field, not a policy that makes the checker or fuzzer run forever."""
    with pytest.raises(PolicyError, match=field):
        build()


def test_the_largest_accepted_numbers_still_build_a_policy() -> None:
    """The bounds leave room for every real policy: a million retries, steps and calls."""
    policy = Policy(
        max_steps=1_000_000,
        max_tool_calls=1_000_000,
        retry=RetryPolicy(max_retries=1_000_000, max_delay_s=86_400),
        max_wall_clock_s=30 * 86_400,
    )
    assert policy.retry.max_retries == 1_000_000


# -- 9: a history given to a run is checked ----------------------------------------------------
_CALL = ToolCall.create("c1", "write", {"path": "/tmp/x"})
_ANSWER = Message.tool(ToolResult(call_id="c1", name="write", content="wrote"))


@pytest.mark.parametrize(
    ("history", "problem"),
    [
        ([Message.user("hi"), Message.system("be brief")], "history[1] is a system message"),
        (
            [Message.user("hi"), Message.assistant(tool_calls=[_CALL])],
            "'c1' (write) have no result at the end of the history",
        ),
        (
            [Message.assistant(tool_calls=[_CALL]), Message.user("and?")],
            "'c1' (write) have no result before history[1]",
        ),
        ([Message.user("hi"), _ANSWER], "history[1] answers tool call 'c1', which no message"),
        (
            [Message.assistant(tool_calls=[_CALL]), _ANSWER, _ANSWER],
            "history[2] answers tool call 'c1' a second time",
        ),
        (
            [Message.assistant(tool_calls=[_CALL, _CALL]), _ANSWER],
            "two tool calls with the id 'c1'",
        ),
        (["hi"], "history[0] is a str, not a fsm_agent.Message"),
    ],
)
def test_an_invalid_history_is_refused_with_what_is_wrong(history: list[Any], problem: str) -> None:
    """A history with a misplaced system message, an unanswered call, an orphan or repeated
    result, or a repeated call id raises InvalidInputError naming the problem and the fix."""
    with pytest.raises(InvalidInputError, match=re.escape(problem)) as caught:
        validate_history(history)
    assert "every assistant tool call followed by exactly one tool result" in str(caught.value)
    agent, _, _ = make_agent([text("ok")])
    with pytest.raises(InvalidInputError, match=re.escape(problem)):
        Conversation(agent, history)


def test_the_history_of_a_real_run_is_valid() -> None:
    """The messages a run ends with (system prompt, tool turns, answer) pass the check, so a
    conversation can always continue from them."""
    agent, _, _ = make_agent(
        [tool_call("write", {"path": "/tmp/a"}), text("done")],
        tools=[write],
        system_prompt="be brief",
    )
    result = agent.run_sync("go")
    validate_history(result.messages)
    assert Conversation(agent, result.messages).messages == result.messages


# -- 12: checkpoints store counters and moves by name ------------------------------------------
def _saved_run(path: Path) -> tuple[SQLiteCheckpointer, RunState]:
    store = SQLiteCheckpointer(path)
    agent, _, _ = make_agent(
        [tool_call("write", {"path": "/tmp/a"}), text("done")], tools=[write], checkpointer=store
    )
    result = agent.run_sync("go")
    return store, store.load(result.run_id).state


def test_a_checkpoint_stores_counters_and_moves_by_name(tmp_path: Path) -> None:
    """The stored run state names every counter and every field of a move, so a counter added
    later cannot change what an older checkpoint means."""
    store, state = _saved_run(tmp_path / "runs.db")
    store.close()
    with sqlite3.connect(tmp_path / "runs.db") as db:
        rows = db.execute("SELECT body, trace FROM checkpoints ORDER BY version").fetchall()
    body = json.loads(rows[-1][0])
    assert body["counters"] == {k: v for k, v in state.counters._asdict().items() if v}
    moves = [move for _, trace in rows for move in json.loads(trace)]
    assert len(moves) == len(state.trace)
    for stored, move in zip(moves, state.trace, strict=True):
        assert stored["source"] == move.source.value and stored["row"] == move.row
        assert isinstance(stored["counters"], dict)


def test_a_positional_checkpoint_of_an_older_version_still_loads(tmp_path: Path) -> None:
    """A checkpoint written in the older positional format (counters and moves as lists) loads
    with the same meaning."""
    store, state = _saved_run(tmp_path / "runs.db")
    store.close()
    # The older format's counters, in the order they had then (before continuations existed).
    legacy = ("steps", "retries", "total_errors", "consecutive_error_turns", "compactions")
    legacy += ("verifications", "repeated_turns")

    def positional(counters: dict[str, int]) -> list[int]:
        return [counters.get(name, 0) for name in legacy]

    with sqlite3.connect(tmp_path / "runs.db") as db:
        for version, body, trace in db.execute(
            "SELECT version, body, trace FROM checkpoints"
        ).fetchall():
            old_body = json.loads(body)
            old_body["counters"] = positional(old_body["counters"])
            moves = []
            for move in json.loads(trace):
                fields = [move.get(name) for name in ("source", "outcome", "dest", "row")]
                moves.append([*fields, positional(move["counters"]), move.get("stop")])
            db.execute(
                "UPDATE checkpoints SET body = ?, trace = ? WHERE version = ?",
                (json.dumps(old_body), json.dumps(moves), version),
            )
    reopened = SQLiteCheckpointer(tmp_path / "runs.db")
    loaded = reopened.load(state.run_id).state
    reopened.close()
    assert loaded.counters == state.counters and loaded.counters.steps == 2
    assert loaded.trace == state.trace


def test_a_checkpoint_with_a_counter_this_version_does_not_know_says_to_upgrade(
    tmp_path: Path,
) -> None:
    """A checkpoint naming a counter this version lacks (written by a newer one) raises
    SchemaVersionError saying to upgrade, rather than loading with a counter dropped."""
    store, state = _saved_run(tmp_path / "runs.db")
    store.close()
    with sqlite3.connect(tmp_path / "runs.db") as db:
        (version, body) = db.execute(
            "SELECT version, body FROM checkpoints ORDER BY version DESC LIMIT 1"
        ).fetchone()
        newer = json.loads(body)
        newer["counters"]["future_counter"] = 2
        db.execute(
            "UPDATE checkpoints SET body = ? WHERE version = ?", (json.dumps(newer), version)
        )
    reopened = SQLiteCheckpointer(tmp_path / "runs.db")
    with pytest.raises(SchemaVersionError, match=r"future_counter.*upgrade"):
        reopened.load(state.run_id)
    reopened.close()


def test_deep_provider_data_on_a_tool_call_is_a_malformed_response() -> None:
    """Provider data nested past what a message may hold makes a MalformedResponseError (a
    retryable model error), not a validation error escaping the provider."""
    wire = json.loads(_openai_body("{}"))
    call = wire["choices"][0]["message"]["tool_calls"][0]
    call["extra_content"] = {"x": json.loads("[" * 300 + "]" * 300)}
    with pytest.raises(MalformedResponseError, match="cannot be kept"):
        _complete(
            lambda client: OpenAIChatModel(
                "m", base_url="http://127.0.0.1:9", client=client, api_key="sk-test-key"
            ),
            json.dumps(wire).encode(),
        )


def test_a_hook_raising_a_tool_signal_is_a_hook_failure() -> None:
    """A hook that raises TaskComplete (a tool's signal, now a BaseException) is reported as a
    failing hook and the run goes on to its ending, rather than escaping the run."""

    class Finisher:
        def before_model_call(self, **kw: Any) -> None:
            raise TaskComplete("from a hook")

    agent, _, _ = make_agent([text("ok")], hooks=[Finisher()])
    events, result = stream(agent)
    assert (result.stop_reason, result.output) == (StopReason.COMPLETED, "ok")
    (error,) = [e for e in events if isinstance(e, HookErrorEvent)]
    assert "TaskComplete, which only a tool may raise" in error.error


def test_no_nesting_depth_makes_a_provider_raise_anything_but_a_model_error() -> None:
    """Around the JSON parser's own limit (where tool input barely decodes and may not encode
    again) every depth either decodes or is a MalformedResponseError: never a RecursionError."""
    outcomes: set[str] = set()
    for depth in range(900, 1010):
        try:
            _complete(
                lambda client: AnthropicModel(
                    "c", base_url="http://127.0.0.1:9", client=client, api_key="k"
                ),
                _anthropic_body(depth),
            )
        except MalformedResponseError as exc:
            outcomes.add(str(exc).split(":")[-1].strip())
        else:
            outcomes.add("decoded")
    assert "decoded" in outcomes and "the response body is not JSON" in outcomes
