"""A conversation across runs: each run continues from the messages the last one ended with.

``Agent.run(prompt, history=previous.messages)`` is the whole mechanism;
:class:`Conversation` keeps the messages for you. Compaction needs nothing extra: the history a
run starts from counts against the budget like any message, so a long conversation is compacted
at the next run's loop entry, by the same strategies and with the same guarantees (the system
prompt, the first user message and the newest user message are kept; no call loses its result).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import contextmanager
from typing import Generic, TypeVar

from .errors import ConfigurationError, InvalidInputError
from .kernel.agent import Agent, RunHandle, RunResult
from .machine.table import State
from .run.events import Event
from .values.messages import Message, validate_history
from .values.model_settings import ModelSettings

__all__ = ["Conversation"]

DepsT = TypeVar("DepsT")


class Conversation(Generic[DepsT]):
    """Runs ``agent`` turn after turn, each run starting from the messages of the one before.

    ``messages`` seeds the conversation (e.g. one loaded from storage); it must be a valid
    conversation (see :func:`~fsm_agent.values.messages.validate_history`), else
    :class:`~fsm_agent.InvalidInputError` says what is wrong. One run at a time: a
    second run while one is in progress, or after a run that is suspended for a human, raises
    :class:`~fsm_agent.InvalidInputError` (resume the suspended run, then :meth:`record` its
    result).

    Every run of the conversation carries its :attr:`conversation_id` (``conversation_id=``,
    e.g. the id it was stored under, else a new id), so traces and stores can group them.
    """

    def __init__(
        self,
        agent: Agent[DepsT],
        messages: Sequence[Message] = (),
        *,
        conversation_id: str | None = None,
    ) -> None:
        if not isinstance(agent, Agent):
            raise ConfigurationError(
                f"a Conversation needs a fsm_agent.Agent, got {type(agent).__name__}"
            )
        validate_history(messages)
        if conversation_id is not None and (
            not isinstance(conversation_id, str) or not conversation_id
        ):
            raise InvalidInputError(
                f"conversation_id must be a non-empty string, got {conversation_id!r}"
            )
        self.conversation_id = conversation_id or agent.runtime.new_id()
        """The id every run of this conversation carries (``RunState.conversation_id``)."""
        self.agent = agent
        self._messages: tuple[Message, ...] = tuple(messages)
        self._last: RunResult | None = None
        self._running = False

    @property
    def messages(self) -> tuple[Message, ...]:
        """The conversation so far: the messages the next run starts from."""
        return self._messages

    @property
    def last_result(self) -> RunResult | None:
        """The result of the latest run (``None`` before the first)."""
        return self._last

    def record(self, result: RunResult) -> None:
        """Continue from ``result``'s messages (a run resumed outside the conversation)."""
        self._messages = result.messages
        self._last = result

    @contextmanager
    def _turn(self) -> Iterator[None]:
        """One run of the conversation at a time, and none while the last one is suspended."""
        if self._running:
            raise InvalidInputError("this conversation already has a run in progress")
        if self._last is not None and self._last.state is State.SUSPENDED:
            raise InvalidInputError(
                "the last run is suspended, waiting for a human: resume it, then record its "
                "result with Conversation.record(result)"
            )
        self._running = True
        try:
            yield
        finally:
            self._running = False

    async def run(
        self,
        prompt: str | Message,
        *,
        handle: RunHandle | None = None,
        deps: DepsT | None = None,
        model_settings: ModelSettings | None = None,
    ) -> RunResult:
        """Run ``prompt`` after the conversation so far; the result's messages become it."""
        with self._turn():
            result = await self.agent.run(
                prompt,
                history=self._messages,
                handle=handle,
                deps=deps,
                model_settings=model_settings,
                conversation_id=self.conversation_id,
            )
        self.record(result)
        return result

    async def run_stream(
        self,
        prompt: str | Message,
        *,
        handle: RunHandle | None = None,
        deps: DepsT | None = None,
        model_settings: ModelSettings | None = None,
    ) -> AsyncIterator[Event]:
        """:meth:`run`, yielding the run's events; the conversation moves on when the stream
        ends (a stream abandoned part-way leaves it where it was)."""
        handle = handle or RunHandle()
        with self._turn():
            async for event in self.agent.run_stream(
                prompt,
                history=self._messages,
                handle=handle,
                deps=deps,
                model_settings=model_settings,
                conversation_id=self.conversation_id,
            ):
                yield event
        if handle.result is not None:
            self.record(handle.result)

    def run_sync(
        self,
        prompt: str | Message,
        *,
        handle: RunHandle | None = None,
        deps: DepsT | None = None,
        model_settings: ModelSettings | None = None,
    ) -> RunResult:
        """:meth:`run` for code without an event loop."""
        with self._turn():
            result = self.agent.run_sync(
                prompt,
                history=self._messages,
                handle=handle,
                deps=deps,
                model_settings=model_settings,
                conversation_id=self.conversation_id,
            )
        self.record(result)
        return result
