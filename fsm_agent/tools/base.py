"""A tool built from a typed function and run: the control-flow signals, the context a tool is
given, the tool itself (its schema, validation, timeout and thread), ``@tool``, the built-in
``done`` tool and the registry. :mod:`fsm_agent.tools` re-exports the public names and says how
tools behave."""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import sys
import threading
import time
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, NamedTuple, NoReturn, TypeVar, overload

from pydantic_core import ValidationError, to_json

from ..errors import ToolDefinitionError
from ..phases.table import MovePhase
from ..values.define import builder, record
from ..values.messages import (
    MAX_ARGUMENT_DEPTH,
    ToolCall,
    ToolDefinition,
    ToolResult,
    ToolResultPart,
    arguments_too_deep,
)
from ..values.record import adapter, field_problem
from ..values.schema import JsonValue
from .definition import arguments_model, check_timeout, checked_name, description_of
from .time_limit import CallLimit

__all__ = [
    "HumanInputRequired",
    "TaskComplete",
    "Tool",
    "ToolContext",
    "ToolExecution",
    "ToolRegistry",
    "ToolReturn",
    "done_tool",
    "serialise_result",
    "tool",
]

DepsT = TypeVar("DepsT")
_new_result = builder(ToolResult)  # one per tool call: see builder()


class TaskComplete(BaseException):
    """Raise from a tool to end the run; ``message`` becomes the final output when given."""

    def __init__(self, message: str = "") -> None:
        super().__init__(message)
        self.message = message


class HumanInputRequired(BaseException):
    """Raised by :meth:`ToolContext.ask_human`: the run suspends until a human answers
    ``question``; the answer becomes the call's result (a control-flow signal, not an error)."""

    def __init__(self, question: str) -> None:
        super().__init__(question)
        self.question = question


@record(kw_only=False)
class ToolReturn:
    """What a tool may return instead of a plain value: the ``text`` the model reads, and
    ``parts`` (images, resource links), a ``structured`` value and ``metadata`` kept on the
    :class:`~fsm_agent.values.messages.ToolResult`. Images reach the providers that take them in a
    tool result; ``text`` is all the others see, so say there what the parts are."""

    text: str
    parts: tuple[ToolResultPart, ...] = ()
    structured: JsonValue = None
    metadata: Mapping[str, JsonValue] = field(default_factory=dict)


def _no_progress(progress: float, total: float | None, message: str | None) -> None:
    return None


@dataclass(slots=True)
class ToolContext(Generic[DepsT]):
    """What a tool that asks for it (a parameter annotated ``ToolContext``) receives.

    ``tool_outputs`` holds the full text of this run's tool outputs that were cut to fit the
    history (by call id).

    Each call gets a context of its own, which the kernel never reads back: writing to it changes
    nothing else. (It is not frozen because one is built per tool call on the kernel's hot path,
    and on Python 3.11 a frozen dataclass costs several times more to build.)
    """

    run_id: str
    call_id: str
    step: int
    deps: DepsT
    cancel_requested: Callable[[], bool] = field(default=lambda: False)
    tool_outputs: Mapping[str, str] = field(default_factory=dict)
    progress: Callable[[float, float | None, str | None], None] = _no_progress

    @property
    def idempotency_key(self) -> str:
        """``run_id/step/call_id``: the same for every execution of this call, including a
        re-run after a crash, so a tool can pass it to a service that deduplicates requests."""
        return f"{self.run_id}/{self.step}/{self.call_id}"

    @property
    def cancelled(self) -> bool:
        """True once the run was asked to cancel; long tools should stop early."""
        return self.cancel_requested()

    def report_progress(
        self, progress: float, total: float | None = None, message: str | None = None
    ) -> None:
        """Say how far a long call has come (``progress`` of ``total``, when known): a
        ``tool_progress`` event for whoever streams the run; nothing when nobody does."""
        for value in (progress, total):
            if value is not None and (
                not isinstance(value, int | float) or isinstance(value, bool) or value != value
            ):
                raise ValueError(
                    f"report_progress takes numbers for progress and total, not {value!r}"
                )
        if message is not None and not isinstance(message, str):
            raise ValueError(f"report_progress takes text for message, not {message!r}")
        self.progress(progress, total, message)

    def ask_human(self, question: str) -> NoReturn:
        """Ask the human ``question`` and end this call: the run suspends (stop reason
        ``suspended``) and, on ``agent.resume``, the human's answer is this call's result."""
        if not isinstance(question, str) or not question.strip():
            raise ValueError("ask_human needs the question as non-empty text")
        raise HumanInputRequired(question)


class ToolExecution(NamedTuple):
    """The outcome of handling one call: its result, and whether it ended the run. (A named
    tuple, like :class:`~fsm_agent.machine.guards.Counters`: one is built per tool call on the
    kernel's hot path, where a frozen dataclass costs several times more on Python 3.11.)"""

    result: ToolResult
    done: bool = False
    final_message: str | None = None
    error: BaseException | None = None
    duration_s: float = 0.0
    question: str | None = None  # the tool asked a human this (the result is a placeholder)
    phase: str | None = None  # the tool returned MovePhase(phase): the phase it asks to move to


class Tool:
    """A callable the model can use. Build one with :func:`tool`."""

    runs_agent: typing.ClassVar[bool] = False
    """Whether a call runs a child agent (an agent used as a tool): its share of the run's
    usage limits and its events are the kernel's to handle."""

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        timeout_s: float | None = None,
        raw_arguments: bool = False,
        threaded: bool = False,
        needs_approval: bool = False,
        idempotent: bool = False,
    ) -> None:
        if not callable(fn):
            raise ToolDefinitionError(f"a tool needs a function, got {type(fn).__name__}")
        self.fn = fn
        self.name = checked_name(name or fn.__name__)
        self.is_async = inspect.iscoroutinefunction(fn)
        check_timeout(self.name, timeout_s, inline=not self.is_async and not threaded)
        self.timeout_s = timeout_s
        self.raw_arguments = raw_arguments
        self.threaded = threaded
        self.needs_approval = needs_approval
        self.idempotent = idempotent
        self._context_param, params = _parameters(fn, self.name)
        self.description = description_of(fn, self.name) if description is None else description
        self._raw_param, self._args_model, schema = arguments_model(
            self.name, params, raw_arguments
        )
        self.definition = ToolDefinition(
            name=self.name, description=self.description, parameters=schema
        )

    def __repr__(self) -> str:
        return f"Tool({self.name!r})"

    @property
    def takes_context(self) -> bool:
        """Whether the function takes a :class:`ToolContext` (and so may report progress)."""
        return self._context_param is not None

    @property
    def uses_context(self) -> bool:
        """Whether a call of this tool is given a :class:`ToolContext`: the function takes one,
        or a subclass runs its calls its own way (and may read it or pass it on). The kernel
        builds no context for the other calls."""
        return self._context_param is not None or type(self).execute is not Tool.execute

    @property
    def reports_progress(self) -> bool:
        """Whether the tool may report progress: a listened run then runs it in a task of its
        own and emits its ``tool_progress`` events while it runs."""
        return self.takes_context

    async def execute(
        self,
        call: ToolCall,
        context: ToolContext[Any] | None,
        *,
        default_timeout_s: float | None = 30.0,
    ) -> ToolExecution:
        """Validate the call's arguments, run the function, and turn what happened into a
        result: never raises, except :class:`asyncio.CancelledError`. The tool's own
        ``timeout_s`` wins over ``default_timeout_s`` (the policy's; ``None``: no limit).
        ``context`` may be ``None`` when the tool does not use one (see :attr:`uses_context`)."""
        timeout = self.timeout_s if self.timeout_s is not None else default_timeout_s
        started = time.perf_counter()
        try:
            kwargs = self._arguments(call)
        except ValidationError as exc:
            return _failure(call, _validation_message(self.name, exc), exc, started)
        except _TooDeep as exc:
            return _failure(call, str(exc), exc, started)
        if self._context_param is not None:
            assert context is not None, f"tool {self.name!r} takes a ToolContext"
            kwargs[self._context_param] = context
        limit: CallLimit | None = None
        try:
            if self.is_async or self.threaded:
                running = (
                    self.fn(**kwargs) if self.is_async else _in_thread(self.name, self.fn, kwargs)
                )
                limit = CallLimit(timeout)
                try:
                    value = await running
                except BaseException as exc:
                    limit.end(exc)
                    raise
                limit.end(None)
            else:
                value = self.fn(**kwargs)
        except TaskComplete as signal:
            return _completed(call, signal, started)
        except HumanInputRequired as ask:
            return _asked(call, ask, started)
        except TimeoutError as exc:
            if limit is None or not limit.expired:  # the tool's own, not our limit
                return _failure(call, _raised(exc), exc, started)
            message = f"Error: tool '{self.name}' timed out after {timeout:g} s"
            return _failure(call, message, exc, started)
        except Exception as exc:
            return _failure(call, _raised(exc), exc, started)
        if isinstance(value, MovePhase):  # a move by code: the kernel makes or refuses it
            result = ToolResult(call_id=call.id, name=call.name, content=value.content)
            return ToolExecution(
                result, phase=value.phase, duration_s=time.perf_counter() - started
            )
        if isinstance(value, ToolReturn):
            return _returned(self.name, call, value, started)
        result = _new_result(call_id=call.id, name=call.name, content=serialise_result(value))
        return ToolExecution(result, duration_s=time.perf_counter() - started)

    def _arguments(self, call: ToolCall) -> dict[str, Any]:
        if self._raw_param is not None:
            return {self._raw_param: call.arguments_json}
        assert self._args_model is not None
        # The model's validator itself: ``model_validate`` passes it six default options.
        validator = self._args_model.__pydantic_validator__
        if call.arguments is None:  # unparseable JSON: let validation explain it [S000 §4.2]
            if arguments_too_deep(call.arguments_json):
                raise _TooDeep(
                    f"Error: invalid arguments for tool '{self.name}': they nest objects and "
                    f"arrays deeper than {MAX_ARGUMENT_DEPTH} levels. Send flatter arguments."
                )
            parsed = validator.validate_json(call.arguments_json)
        else:
            parsed = validator.validate_python(call.arguments)
        # The validated model keeps exactly its fields' values in its ``__dict__`` (it refuses
        # extra arguments): a copy of it, not a read of each field through pydantic's hook.
        return dict(parsed.__dict__)


async def _in_thread(name: str, fn: Callable[..., Any], kwargs: dict[str, Any]) -> object:
    """``fn(**kwargs)`` in a daemon thread of its own (with the caller's context variables).

    Not the loop's default executor: ``asyncio.run`` waits for every executor thread when it
    ends, so a tool abandoned at its timeout would hold ``run_sync`` until it returned."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[object] = loop.create_future()
    context = contextvars.copy_context()

    def work() -> None:
        try:
            value = context.run(fn, **kwargs)
        except BaseException as exc:  # signals too: they travel to the awaiting task
            _deliver(loop, future, None, exc)
        else:
            _deliver(loop, future, value, None)

    threading.Thread(target=work, name=f"fsm_agent tool {name}", daemon=True).start()
    return await future


def _deliver(
    loop: asyncio.AbstractEventLoop,
    future: asyncio.Future[object],
    value: object,
    exc: BaseException | None,
) -> None:
    """Hand a thread's outcome to its future, unless the call was abandoned meanwhile."""

    def settle() -> None:
        if future.done():  # cut off by its timeout or the run's interrupt
            return
        if exc is None:
            future.set_result(value)
        else:
            future.set_exception(exc)

    try:
        loop.call_soon_threadsafe(settle)
    except RuntimeError:  # the loop is closed: the run ended without this call's outcome
        return


@overload
def tool(fn: Callable[..., Any], /) -> Tool: ...
@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    timeout_s: float | None = None,
    raw_arguments: bool = False,
    threaded: bool = False,
    needs_approval: bool = False,
    idempotent: bool = False,
) -> Callable[[Callable[..., Any]], Tool]: ...
def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    timeout_s: float | None = None,
    raw_arguments: bool = False,
    threaded: bool = False,
    needs_approval: bool = False,
    idempotent: bool = False,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Make a tool of a typed sync or async function (as ``@tool`` or ``@tool(...)``).

    Every parameter needs a type hint; one parameter may be annotated :class:`ToolContext`
    (it is injected, not shown to the model). The docstring's first paragraph is the
    description. ``timeout_s`` overrides the policy's ``tool_timeout_s``. With
    ``needs_approval``, a call the permission hooks do not decide asks a human (the run
    suspends) instead of running. Mark a tool ``idempotent`` when running it twice has the
    effect of running it once: after a crash in the middle of its call, a durable run (one with
    a checkpointer) runs it again; any other tool is not re-run and the model is told its
    outcome is unknown (see ``docs/durability.md``).
    """

    def build(f: Callable[..., Any]) -> Tool:
        return Tool(
            f,
            name=name,
            description=description,
            timeout_s=timeout_s,
            raw_arguments=raw_arguments,
            threaded=threaded,
            needs_approval=needs_approval,
            idempotent=idempotent,
        )

    return build(fn) if fn is not None else build


def _done(message: str) -> None:
    """Call this when the task is complete, with the final answer for the user. Call it alone,
    once you have read the results of your other tool calls."""
    raise TaskComplete(message)


@functools.cache
def done_tool() -> Tool:
    """The built-in done tool: ``done(message)`` ends the run with ``message``.

    Built once: a :class:`Tool` is immutable after construction, so every agent shares it.
    """
    return Tool(_done, name="done", idempotent=True)


class ToolRegistry(Mapping[str, Tool]):
    """The tools of an agent by name; duplicate names are refused."""

    def __init__(self, tools: Iterable[Tool | Callable[..., Any]]) -> None:
        self._tools: dict[str, Tool] = {}
        for item in tools:
            built = item if isinstance(item, Tool) else Tool(item)
            if built.name in self._tools:
                raise ToolDefinitionError(
                    f"two tools are named {built.name!r}; give one another name with "
                    "@tool(name=...)"
                )
            self._tools[built.name] = built
        self.definitions: tuple[ToolDefinition, ...] = tuple(
            t.definition for t in self._tools.values()
        )

    def __getitem__(self, name: str) -> Tool:
        return self._tools[name]

    def find(self, name: str) -> Tool | None:
        """The tool called ``name``, or ``None`` (``Mapping.get`` without its extra call: the
        kernel looks up every tool call)."""
        return self._tools.get(name)

    def __iter__(self) -> typing.Iterator[str]:
        return iter(self._tools)

    def __len__(self) -> int:
        return len(self._tools)


def serialise_result(value: object) -> str:
    """A tool's return value as result text: strings as they are, everything else as JSON;
    a value JSON cannot hold is shown with ``str()`` and a note, and the run goes on."""
    if isinstance(value, str):
        return value
    if type(value) is int and value.bit_length() <= 64:
        return str(value)  # its JSON, for less than ``to_json`` costs (str() refuses huge ones)
    if _is_model(value):
        text: str = value.model_dump_json()  # type: ignore[attr-defined]
        return text
    try:
        return to_json(value).decode()
    except Exception:  # pydantic_core raises several types for values it cannot serialise
        return f"{value} (note: the result was not JSON-serialisable; shown as text)"


def _is_model(value: object) -> bool:
    """Whether ``value`` is a pydantic model (none is before pydantic's model module loads,
    which fsm_agent leaves to the first code that needs it)."""
    main = sys.modules.get("pydantic.main")
    return main is not None and isinstance(value, main.BaseModel)


class _TooDeep(ValueError):
    """The call's arguments nest deeper than any tool accepts (the message is the result)."""


def _raised(exc: BaseException) -> str:
    return f"Error: {type(exc).__name__}: {exc}"


def _returned(name: str, call: ToolCall, value: ToolReturn, started: float) -> ToolExecution:
    """The result a tool gave as a :class:`ToolReturn`, validated (it is the user's input); an
    invalid one, or one holding a value JSON cannot (a NaN, an infinity, a cycle: what a run
    stores could not be read back as it was), is an error result."""
    try:
        result = adapter(ToolResult).validate_python(
            {
                "call_id": call.id,
                "name": call.name,
                "content": value.text,
                "parts": value.parts,
                "structured": value.structured,
                "metadata": dict(value.metadata),
            }
        )
    except ValidationError as exc:
        message = f"Error: tool '{name}' returned an invalid ToolReturn: {exc}"
        return _failure(call, message, exc, started)
    problem = field_problem(result)
    if problem is not None:
        message = f"Error: tool '{name}' returned an invalid ToolReturn: {problem}"
        return _failure(call, message, ValueError(problem), started)
    return ToolExecution(result, duration_s=time.perf_counter() - started)


def _completed(call: ToolCall, signal: TaskComplete, started: float) -> ToolExecution:
    """The execution of a call whose tool raised :class:`TaskComplete`: it ends the run."""
    result = ToolResult(call_id=call.id, name=call.name, content=signal.message or "Task complete.")
    return ToolExecution(
        result,
        done=True,
        final_message=signal.message or None,
        duration_s=time.perf_counter() - started,
    )


def _asked(call: ToolCall, ask: HumanInputRequired, started: float) -> ToolExecution:
    """The execution of a call whose tool asked a human: a placeholder result and the
    question."""
    result = ToolResult(call_id=call.id, name=call.name, content="")
    return ToolExecution(result, question=ask.question, duration_s=time.perf_counter() - started)


def _failure(call: ToolCall, message: str, exc: BaseException, started: float) -> ToolExecution:
    result = ToolResult(call_id=call.id, name=call.name, content=message, is_error=True)
    return ToolExecution(result, error=exc, duration_s=time.perf_counter() - started)


def _validation_message(name: str, exc: ValidationError) -> str:
    problems = "; ".join(
        f"{'.'.join(str(p) for p in err['loc']) or 'arguments'}: {err['msg']}"
        for err in exc.errors(include_url=False)
    )
    return f"Error: invalid arguments for tool '{name}': {problems}. Fix them and call again."


def _parameters(fn: Callable[..., Any], name: str) -> tuple[str | None, list[tuple[str, Any, Any]]]:
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except Exception as exc:
        raise ToolDefinitionError(f"tool {name!r}: cannot read its type hints: {exc}") from exc
    context_param: str | None = None
    params: list[tuple[str, Any, Any]] = []
    for pname, param in inspect.signature(fn).parameters.items():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise ToolDefinitionError(
                f"tool {name!r}: *args/**kwargs cannot be described to a model; name each parameter"
            )
        if pname not in hints:
            raise ToolDefinitionError(
                f"tool {name!r}: parameter {pname!r} has no type hint; annotate it "
                "(e.g. 'x: int') so its schema can be built"
            )
        annotation = hints[pname]
        if annotation is ToolContext or typing.get_origin(annotation) is ToolContext:
            context_param = pname
            continue
        default = ... if param.default is param.empty else param.default
        params.append((pname, annotation, default))
    return context_param, params
