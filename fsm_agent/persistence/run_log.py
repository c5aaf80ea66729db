"""The durability of one run: checkpoints after moves, and the write-ahead journal of effects.

The driver calls :meth:`RunLog.moved` after every move; the ``calling`` handler asks
:meth:`RunLog.begin_model_call` before a model call and reports its end; the ``dispatching``
handler runs tools through :meth:`RunLog.execute_tool`. On resume a recorded outcome is reused;
an intent without an outcome re-issues a model call, re-runs an idempotent tool, and otherwise
settles the call as "outcome unknown" (for the model, or as a question for a human).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Literal

from pydantic import JsonValue

from .. import errors
from ..errors import ModelError
from ..machine.table import TERMINAL, State
from ..messages import ModelResponse, ToolCall, ToolResult
from ..run_state import RunState
from ..tools import Tool, ToolContext, ToolExecution
from . import UNKNOWN_OUTCOME_PREFIX, Checkpointer, Durability, EffectRecord

__all__ = ["RecordedToolError", "RunLog", "UnknownOutcome", "encode_model_outcome"]

UnknownOutcome = Literal["model", "human"]
"""Who settles a non-idempotent call a crash cut short: the model (an "outcome unknown" error
result) or a human (the run suspends with the question)."""

UNKNOWN_RESULT = (
    UNKNOWN_OUTCOME_PREFIX + ": the run stopped while tool '{name}' was running (call {id}). It is "
    "not marked idempotent, so it was not run again; it may or may not have taken effect. Check "
    "before calling it again."
)
UNKNOWN_QUESTION = (
    "The run stopped while tool '{name}' was running with arguments {args} (call {id}). It is "
    "not marked idempotent, so it was not run again. Did it take effect? Your answer becomes "
    "the call's result."
)


class RecordedToolError(Exception):
    """The error a tool raised in an earlier process, as its journal recorded it."""


class RunLog:
    """Saves one run's checkpoints and journals its effects (see the module docstring)."""

    def __init__(
        self,
        store: Checkpointer,
        run_id: str,
        *,
        version: int,
        mode: Durability,
        unknown_outcome: UnknownOutcome,
        effects: dict[str, EffectRecord] | None = None,
    ) -> None:
        self.store = store
        self.run_id = run_id
        self.version = version
        self.mode = mode
        self.journal = mode is not Durability.EXIT
        self.unknown_outcome = unknown_outcome
        self.effects = effects or {}
        self._writer: ThreadPoolExecutor | None = None
        self._pending: list[Future[None]] = []

    # -- checkpoints ----------------------------------------------------------------------------
    def claim(self, rs: RunState) -> None:
        """Write the next checkpoint now, whatever the mode: the resume of a worker that loaded
        an older version fails here, before anything runs."""
        self.store.save(rs, version=self.version + 1)
        self.version += 1

    def moved(self, rs: RunState) -> None:
        """Save the state after a move, as the durability mode says."""
        mode = self.mode
        if mode is Durability.SYNC:
            self.store.save(rs, version=self.version + 1)
            self.version += 1
        elif mode is Durability.ASYNC:
            self.version += 1
            self._submit(self._save_copy, _snapshot(rs), self.version)
            if rs.state in TERMINAL or rs.state is State.SUSPENDED:
                self.flush()
        elif rs.state in TERMINAL or rs.state is State.SUSPENDED:
            self.store.save(rs, version=self.version + 1)
            self.version += 1

    def interrupted(self, rs: RunState) -> None:
        """Save the ending of a run whose task was cancelled (its last move is not saved yet)."""
        if self.mode is Durability.ASYNC:
            self.flush()
        self.store.save(rs, version=self.version + 1)
        self.version += 1

    def _save_copy(self, rs: RunState, version: int) -> None:
        self.store.save(rs, version=version)

    def _submit(self, fn: Callable[..., None], *args: object) -> None:
        self._raise_failed()
        if self._writer is None:
            self._writer = ThreadPoolExecutor(1, thread_name_prefix=f"fsm-agent-{self.run_id}")
        self._pending.append(self._writer.submit(fn, *args))

    def _raise_failed(self) -> None:
        while self._pending and self._pending[0].done():
            self._pending.pop(0).result()

    def flush(self) -> None:
        """Wait until every background write is stored; raise the first that failed."""
        pending, self._pending = self._pending, []
        for future in pending:
            future.result()

    def close(self) -> None:
        """Stop the background writer (after its queued writes)."""
        if self._writer is not None:
            self._writer.shutdown(wait=True)
            self._writer = None

    # -- the journal ----------------------------------------------------------------------------
    def _intent(self, key: str, kind: Literal["model", "tool"]) -> None:
        if self._pending:
            self.flush()  # the intent must be stored before the effect starts
        self.store.record_intent(self.run_id, key, kind, version=self.version)

    def _result(self, key: str, result: str) -> None:
        if self.mode is Durability.ASYNC:
            self._submit(self._record, key, result, self.version)
        else:
            self.store.record_result(self.run_id, key, result, version=self.version)

    def _record(self, key: str, result: str, version: int) -> None:
        self.store.record_result(self.run_id, key, result, version=version)

    def begin_model_call(
        self, rs: RunState
    ) -> tuple[str | None, ModelResponse | ModelError | None]:
        """Before the run's ``rs.model_calls``-th model call: the outcome (response or error)
        an earlier process recorded for it; else records the intent and returns the call's key,
        to report its end with :meth:`model_answered` or :meth:`model_failed`."""
        if not self.journal:
            return None, None
        key = f"{rs.counters.steps + 1}/model/{rs.model_calls}"
        record = self.effects.get(key)
        if record is not None and record.result is not None:
            return None, _decode_model(record.result)
        if record is None:
            self._intent(key, "model")
        return key, None

    def model_answered(
        self, key: str, response: ModelResponse, *, model: str | None = None
    ) -> None:
        """Record the response of the call ``key`` (and which model of a fallback chain gave
        it, when ``model`` is given)."""
        self._result(key, encode_model_outcome(response, model=model))

    def model_failed(self, key: str, exc: Exception, *, model: str | None = None) -> None:
        """Record the error of the call ``key`` (and the chain's model that raised it)."""
        self._result(key, encode_model_outcome(exc, model=model))

    async def execute_tool(
        self, tool: Tool, call: ToolCall, context: ToolContext[object], default_timeout_s: float
    ) -> ToolExecution:
        """Run one call through the journal: reuse a recorded outcome, settle a call a crash cut
        short, or record the intent, run the tool and record its outcome."""
        if not self.journal:
            return await tool.execute(call, context, default_timeout_s=default_timeout_s)
        key = f"{context.step}/tool/{call.id}"
        record = self.effects.get(key)
        if record is not None and record.result is not None:
            return _decode_tool(record.result, call)
        if record is None:
            self._intent(key, "tool")
        elif not tool.idempotent:
            execution = self._unknown(call)
            self._result(key, _encode_tool(execution))
            return execution
        execution = await tool.execute(call, context, default_timeout_s=default_timeout_s)
        self._result(key, _encode_tool(execution))
        return execution

    def _unknown(self, call: ToolCall) -> ToolExecution:
        if self.unknown_outcome == "human":
            question = UNKNOWN_QUESTION.format(name=call.name, args=call.arguments_json, id=call.id)
            return ToolExecution(
                ToolResult(call_id=call.id, name=call.name, content=""), question=question
            )
        content = UNKNOWN_RESULT.format(name=call.name, id=call.id)
        return ToolExecution(
            ToolResult(call_id=call.id, name=call.name, content=content, is_error=True),
            error=RecordedToolError(content),
        )


def _snapshot(rs: RunState) -> RunState:
    """A copy that the run's further moves do not change (the lists and dicts are copied; the
    messages and results in them are immutable values)."""
    return rs.model_copy(
        update={
            "messages": list(rs.messages),
            "trace": list(rs.trace),
            "pending_tool_calls": list(rs.pending_tool_calls),
            "tool_results": list(rs.tool_results),
            "approved_calls": list(rs.approved_calls),
            "human_requests": list(rs.human_requests),
            "tool_outputs": dict(rs.tool_outputs),
            "recent_turns": list(rs.recent_turns),
            "answered_by": dict(rs.answered_by),
        }
    )


def encode_model_outcome(outcome: ModelResponse | Exception, *, model: str | None = None) -> str:
    """A model call's outcome as the journal stores it (:func:`_decode_model` reads it back):
    the response, or the error with what classifying it needs; and ``model``, the fallback
    chain's model that made the call, when given."""
    by = "" if model is None else '"model":' + json.dumps(model) + ","
    if isinstance(outcome, ModelResponse):
        return "{" + by + '"response":' + outcome.model_dump_json() + "}"
    error: dict[str, JsonValue] = {"type": "ModelError", "message": str(outcome)}
    if isinstance(outcome, ModelError):
        error.update(
            type=type(outcome).__name__,
            retryable=outcome.retryable,
            retry_after=outcome.retry_after,
            status_code=outcome.status_code,
            provider=outcome.provider,
        )
    else:
        error["message"] = f"the model raised {type(outcome).__name__}: {outcome}"
    return json.dumps({"error": error} if model is None else {"model": model, "error": error})


def _decode_model(text: str) -> ModelResponse | ModelError:
    try:
        data = json.loads(text)
        if "response" in data:
            return ModelResponse.model_validate(data["response"])
        error = data["error"]
        cls = getattr(errors, str(error["type"]), ModelError)
        if not (isinstance(cls, type) and issubclass(cls, ModelError)):
            cls = ModelError
        return cls(
            str(error["message"]),
            retryable=error.get("retryable", False),
            retry_after=error.get("retry_after"),
            status_code=error.get("status_code"),
            provider=error.get("provider"),
        )
    except (ValueError, KeyError, TypeError) as problem:
        raise errors.CorruptCheckpointError(
            f"a recorded model call does not decode ({problem})"
        ) from None


def _encode_tool(execution: ToolExecution) -> str:
    return json.dumps(
        {
            "result": execution.result.model_dump(mode="json"),
            "done": execution.done,
            "final_message": execution.final_message,
            "error": None if execution.error is None else repr(execution.error),
            "question": execution.question,
            "duration_s": execution.duration_s,
        }
    )


def _decode_tool(text: str, call: ToolCall) -> ToolExecution:
    try:
        data = json.loads(text)
        result = ToolResult.model_validate(data["result"])
        error = data["error"]
        return ToolExecution(
            result,
            done=bool(data["done"]),
            final_message=data["final_message"],
            error=None if error is None else RecordedToolError(str(error)),
            duration_s=float(data["duration_s"]),
            question=data["question"],
        )
    except (ValueError, KeyError, TypeError) as problem:
        raise errors.CorruptCheckpointError(
            f"the recorded result of tool call {call.id!r} does not decode ({problem})"
        ) from None
