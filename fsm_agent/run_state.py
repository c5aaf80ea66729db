"""The run state: the one JSON-serialisable value that holds everything about a run.

It includes the machine's position (``state``), so saving it after a move saves where the run
is [S002 Factor 12]. The kernel mutates one instance in place as the run goes; ``model_copy``
or ``model_dump_json`` take a snapshot.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field

from .machine import Move
from .messages import Message, ToolCall, ToolResult, Usage
from .table import Counters, State, StopReason

__all__ = ["HumanRequest", "RunState"]


class HumanRequest(BaseModel):
    """A tool call a suspended run waits on: an ``approval`` asked by the permission hook, or a
    ``question`` the tool asked with ``ToolContext.ask_human``. ``resume`` fills ``decision``
    (``allow``, ``deny`` or ``answer``) and ``reply`` (the denial reason or the answer)."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["approval", "question"]
    call: ToolCall
    question: str | None = None  # the tool's question, or the hook's reason for asking
    decision: Literal["allow", "deny", "answer"] | None = None
    reply: str | None = None


class RunState(BaseModel):
    """Everything a run knows: position, counters, usage, thread, pending work, the ending."""

    model_config = ConfigDict(extra="forbid")

    # The kernel assigns a dozen fields per step; the run state validates on the way in and out
    # (model_validate/model_dump), never on assignment, so a plain attribute write does. It
    # skips pydantic's ``model_fields_set`` bookkeeping: nothing here dumps with exclude_unset.
    # ``__delattr__`` too: CPython writes through the C slot only when both are object's (with
    # pydantic's ``__delattr__`` left in place, every write calls ``__setattr__`` from Python,
    # six times slower).
    if not TYPE_CHECKING:
        __setattr__ = object.__setattr__
        __delattr__ = object.__delattr__

    run_id: str
    state: State = State.IDLE
    counters: Counters = Counters()
    usage: Usage = Field(default_factory=Usage)
    messages: list[Message] = Field(default_factory=list)
    context_tokens: int = 0  # estimate for ``messages``, kept up to date as they change
    pending_tool_calls: list[ToolCall] = Field(default_factory=list)
    last_text: str = ""  # the text of the last model answer, the output candidate
    feedback: str | None = None  # verifier feedback waiting to be injected
    done_message: str | None = None  # what the done tool asked to be the output
    model_calls: int = 0  # attempts, failed ones included
    active_s: float = 0.0  # seconds spent running over all invocations (max_wall_clock_s)
    tool_executions: int = 0
    stop_reason: StopReason | None = None
    output: str | None = None
    error: str | None = None  # the error that ended the run, as text
    trace: list[Move] = Field(default_factory=list)
    # The current tool turn and human input (empty between turns):
    tool_results: list[ToolResult] = Field(default_factory=list)  # finished, not yet in messages
    approved_calls: list[str] = Field(default_factory=list)  # pending call ids already approved
    human_requests: list[HumanRequest] = Field(default_factory=list)  # what a suspension awaits
    resume_token: str | None = None  # the valid resume handle's token while suspended
    suspensions: int = 0
    tool_outputs: dict[str, str] = Field(default_factory=dict)  # full text of cut outputs by id
    recent_turns: list[str] = Field(default_factory=list)  # the last two turns' calls (loop guard)

    @classmethod
    def start(cls, run_id: str) -> RunState:
        """The state a new run starts from: ``RunState(run_id=run_id)`` without validating
        the defaults (a run starts several times faster; ``tests/test_run_state.py`` checks
        that the two are equal)."""
        fields = _START.copy()  # the immutable defaults; fresh containers below
        fields["run_id"] = run_id
        fields["messages"] = []
        fields["pending_tool_calls"] = []
        fields["trace"] = []
        fields["tool_results"] = []
        fields["approved_calls"] = []
        fields["human_requests"] = []
        fields["tool_outputs"] = {}
        fields["recent_turns"] = []
        rs = _new(cls)
        _set(rs, "__dict__", fields)
        _set(rs, "__pydantic_fields_set__", {"run_id"})
        _set(rs, "__pydantic_extra__", None)
        _set(rs, "__pydantic_private__", None)
        return rs


_new = object.__new__
_set = object.__setattr__
_START: dict[str, object] = dict(RunState.model_construct(run_id="").__dict__)
"""A new run's fields in declaration order (``RunState.start`` replaces the run id and the
mutable containers)."""
