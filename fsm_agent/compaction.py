"""The context budget, and compaction strategies that never split a tool call from its result.

**Budget.** Every message is counted once, when it joins the history, by a :class:`Tokenizer`
(by default :func:`estimate_tokens`: about four characters a token plus a small overhead); the
kernel keeps the running sum, so checking the budget costs the same however long the history
is. When a provider reports the input tokens of a call, that count replaces the estimate. The
budget is ``threshold`` × the context window (the model declares its window; the policy may
override it); a compaction shortens the history to ``target`` × the budget.

**Strategies** (:class:`CompactionStrategy`) run in order until the history fits:

- :class:`TrimToolOutputs` replaces old, long tool outputs with a short marker;
- :class:`Summarize` asks the model (tools off) for a summary of the oldest part and puts it
  in that part's place, keeping the recent turns verbatim;
- :class:`SlidingWindow` drops the oldest groups.

Every strategy keeps the system prompt, the first user message, the newest user message and
the last ``keep_recent`` messages, and works on *groups*: an assistant message with tool calls
travels with all of its results, so no call is ever left without its result or a result
without its call. A strategy that raises (a failed summary call) is
skipped and the next one runs; :class:`Compactor` runs the list.
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from typing import Protocol, runtime_checkable

from .errors import Interrupted, MalformedResponseError
from .models import Model
from .policy import CompactionSettings, CompactionStrategyName
from .values.define import record
from .values.messages import (
    FinishReason,
    ImagePart,
    Message,
    ModelRequest,
    ModelResponse,
    Role,
    TextPart,
    ToolCall,
    ToolResult,
)

__all__ = [
    "SUMMARY_HEADER",
    "SUMMARY_INSTRUCTIONS",
    "CompactionJob",
    "CompactionResult",
    "CompactionStrategy",
    "Compactor",
    "ModelCall",
    "SlidingWindow",
    "Summarize",
    "Thread",
    "Tokenizer",
    "TrimToolOutputs",
    "estimate_tokens",
    "protected_layout",
]

_MESSAGE_OVERHEAD = 4
_IMAGE_TOKENS = 768
_TRANSCRIPT_PART_CHARS = 2_000

SUMMARY_HEADER = "Summary of the earlier conversation (older messages were replaced by it):\n"
"""The start of every summary message :class:`Summarize` writes."""

SUMMARY_INSTRUCTIONS = (
    "Summarise the conversation below so that the work can continue without it. Keep the "
    "user's goals and constraints, decisions taken, facts and results found (names, numbers, "
    "paths, identifiers), what was tried and failed, and what remains to be done. Be concise; "
    "do not call tools."
)


# -- the budget ------------------------------------------------------------------------------
@runtime_checkable
class Tokenizer(Protocol):
    """Counts the tokens of one message. Any ``(Message) -> int`` callable is one: wrap a real
    tokenizer for exact counts, or keep the default :func:`estimate_tokens`."""

    def __call__(self, message: Message, /) -> int:
        """The tokens ``message`` takes in a request."""
        ...


def estimate_tokens(message: Message) -> int:
    """A cheap token estimate for one message: four characters a token, plus overheads."""
    chars = 0
    extra = _MESSAGE_OVERHEAD
    for part in message.parts:
        if part.type == "tool_call":
            chars += len(part.name) + len(part.arguments_json)
            extra += 4
        elif part.type == "tool_result":
            chars += len(part.content)
            extra += 4
            if part.parts:  # images sent with the result (to the providers that take them)
                extra += _IMAGE_TOKENS * sum(p.type == "image" for p in part.parts)
        elif part.type == "image":
            extra += _IMAGE_TOKENS
        else:
            chars += len(part.text)
    return chars // 4 + extra


@record(kw_only=False)
class Thread:
    """A history under compaction: the messages and their token counts, index for index."""

    messages: tuple[Message, ...]
    sizes: tuple[int, ...]

    def __post_init__(self) -> None:
        if len(self.messages) != len(self.sizes):
            raise ValueError("a Thread needs one size per message")

    @property
    def tokens(self) -> int:
        """The history's token count: the sum of its messages' sizes."""
        return sum(self.sizes)

    @classmethod
    def of(cls, messages: Sequence[Message], tokenizer: Tokenizer) -> Thread:
        """Count ``messages`` with ``tokenizer``."""
        return cls(tuple(messages), tuple(tokenizer(m) for m in messages))


class ModelCall(Protocol):
    """The run's model call, handed to strategies: interruptible, and counted in the run's
    model calls and usage. ``model`` replaces the agent's model for this call."""

    def __call__(
        self, request: ModelRequest, model: Model | None = None, /
    ) -> Awaitable[ModelResponse]:
        """Make the call and return the response (or raise)."""
        ...


@record(kw_only=False)
class CompactionJob:
    """What one compaction aims at, and what strategies may use to get there.

    ``target`` is in the tokenizer's units (``None``: no token goal); ``max_messages`` caps
    the message count (``None``: no cap); ``keep_recent`` messages at the end are never
    touched; ``forced`` says a ``length`` finish or a context-window error asked for it.
    """

    target: int | None
    max_messages: int | None = None
    keep_recent: int = 2
    forced: bool = False
    tokenizer: Tokenizer = estimate_tokens
    complete: ModelCall | None = None

    def fits(self, tokens: int, count: int) -> bool:
        """``tokens`` over ``count`` messages meet the goal."""
        return (self.target is None or tokens <= self.target) and (
            self.max_messages is None or count <= self.max_messages
        )


@runtime_checkable
class CompactionStrategy(Protocol):
    """One way to shorten a history. ``compact`` returns a shorter :class:`Thread`, or ``None``
    when it cannot help; it may raise (the :class:`Compactor` then tries the next strategy).
    It must keep every call with all its results, the system prompt first and once, and the
    messages :func:`protected_layout` protects."""

    @property
    def name(self) -> str:
        """The strategy's name in ``compacted`` events."""
        ...

    async def compact(self, thread: Thread, job: CompactionJob) -> Thread | None:
        """A shorter thread, or ``None``."""
        ...


# -- layout ----------------------------------------------------------------------------------
@record(kw_only=False)
class _Layout:
    """Where a history may be cut: ``[head, tail)`` holds the removable groups."""

    head: int  # messages before this (system prompt, first user message) are kept
    tail: int  # messages from here on (the recent ones) are kept
    newest_user: int  # kept too; -1 when there is none after the head
    groups: tuple[tuple[int, int], ...]  # [start, end) spans in [head, tail), newest user out


def _layout(messages: Sequence[Message], keep_recent: int) -> _Layout:
    count = len(messages)
    head = 1 if count and messages[0].role is Role.SYSTEM else 0
    while head < count and messages[head].role is not Role.USER:
        head += 1
    head = min(head + 1, count)
    tail = max(head, count - keep_recent)
    while tail > head and messages[tail].role is Role.TOOL:
        tail -= 1  # back to the call that owns these results
    newest_user = -1
    for index in range(count - 1, head - 1, -1):
        if messages[index].role is Role.USER:
            newest_user = index
            break
    groups: list[tuple[int, int]] = []
    i = head
    while i < tail:
        j = i + 1
        while j < tail and messages[j].role is Role.TOOL:
            j += 1
        if i != newest_user:
            groups.append((i, j))
        i = j
    return _Layout(head, tail, newest_user, tuple(groups))


def protected_layout(messages: Sequence[Message], keep_recent: int) -> tuple[int, int, int]:
    """``(head, tail, newest_user)``: strategies keep ``messages[:head]`` (system prompt and
    first user message), ``messages[tail:]`` (the last ``keep_recent`` messages, widened to a
    whole call group) and ``messages[newest_user]`` (``-1`` when that is in the head)."""
    layout = _layout(messages, keep_recent)
    return layout.head, layout.tail, layout.newest_user


def _without(thread: Thread, dropped: Sequence[tuple[int, int]]) -> Thread:
    """``thread`` without the ``dropped`` spans (in order, not overlapping)."""
    messages: list[Message] = []
    sizes: list[int] = []
    start = 0
    for begin, end in dropped:
        messages += thread.messages[start:begin]
        sizes += thread.sizes[start:begin]
        start = end
    messages += thread.messages[start:]
    sizes += thread.sizes[start:]
    return Thread(tuple(messages), tuple(sizes))


# -- strategies ------------------------------------------------------------------------------
class SlidingWindow:
    """Drop the oldest groups (a call turn with all its results, or a lone message) until the
    history fits the job's token target and message cap."""

    name = CompactionStrategyName.SLIDING_WINDOW.value

    async def compact(self, thread: Thread, job: CompactionJob) -> Thread | None:
        """The thread without its oldest removable groups, or ``None`` when none can go."""
        layout = _layout(thread.messages, job.keep_recent)
        tokens = thread.tokens
        count = len(thread.messages)
        dropped: list[tuple[int, int]] = []
        for start, end in layout.groups:
            if job.fits(tokens, count):
                break
            dropped.append((start, end))
            tokens -= sum(thread.sizes[start:end])
            count -= end - start
        return _without(thread, dropped) if dropped else None


class TrimToolOutputs:
    """Replace old tool outputs longer than ``over`` characters with a short marker, oldest
    first, until the history fits. Calls and results keep their
    ids and order; only the content changes. ``marker`` may use ``{name}`` and ``{chars}``."""

    name = CompactionStrategyName.TRIM_TOOL_OUTPUTS.value

    def __init__(
        self,
        over: int = 200,
        marker: str = "[output of {name} trimmed to save context: it was {chars} characters]",
    ) -> None:
        self.over = over
        self.marker = marker
        self._prefix = marker.split("{", 1)[0]

    def _trimmed(self, result: ToolResult) -> ToolResult:
        if len(result.content) <= self.over or (
            self._prefix and result.content.startswith(self._prefix)
        ):
            return result
        content = self.marker.format(name=result.name, chars=len(result.content))
        return result.model_copy(update={"content": content})

    async def compact(self, thread: Thread, job: CompactionJob) -> Thread | None:
        """The thread with old long outputs trimmed, or ``None`` when none qualifies."""
        if job.target is None:
            return None  # trimming shortens no message count
        layout = _layout(thread.messages, job.keep_recent)
        messages = list(thread.messages)
        sizes = list(thread.sizes)
        tokens = thread.tokens
        changed = False
        for index in range(layout.head, layout.tail):
            if tokens <= job.target:
                break
            message = messages[index]
            if message.role is not Role.TOOL:
                continue
            parts = tuple(
                self._trimmed(p) if isinstance(p, ToolResult) else p for p in message.parts
            )
            if all(new is old for new, old in zip(parts, message.parts, strict=True)):
                continue
            messages[index] = message.model_copy(update={"parts": parts})
            size = job.tokenizer(messages[index])
            tokens += size - sizes[index]
            sizes[index] = size
            changed = True
        return Thread(tuple(messages), tuple(sizes)) if changed else None


def _transcript(messages: Sequence[Message]) -> str:
    """A plain-text rendering of ``messages`` for a summary request (long parts are cut)."""

    def cut(text: str) -> str:
        if len(text) <= _TRANSCRIPT_PART_CHARS:
            return text
        return f"{text[:_TRANSCRIPT_PART_CHARS]} […{len(text) - _TRANSCRIPT_PART_CHARS} more]"

    lines: list[str] = []
    for message in messages:
        for part in message.parts:
            if isinstance(part, TextPart) and part.text:
                lines.append(f"{message.role.value}: {cut(part.text)}")
            elif isinstance(part, ToolCall):
                lines.append(f"assistant called {part.name}({cut(part.arguments_json)})")
            elif isinstance(part, ToolResult):
                status = "failed" if part.is_error else "returned"
                lines.append(f"tool {part.name} {status}: {cut(part.content)}")
            elif isinstance(part, ImagePart):
                lines.append(f"{message.role.value}: [image]")
    return "\n".join(lines)


class Summarize:
    """Replace the oldest part of the history with a summary written by the model.

    The recent groups that fit in ``keep_share`` × the target stay verbatim (at least the job's
    ``keep_recent`` messages); the groups before them, rendered as a transcript, go to the model
    in one tools-off request (``model`` or the agent's), and its answer comes back as one
    assistant message starting with :data:`SUMMARY_HEADER`. The call is the run's: counted in
    its model calls and usage, cut short by cancel or the deadline. A failed call raises, so the
    :class:`Compactor` falls back to the next strategy.
    """

    name = CompactionStrategyName.SUMMARIZE.value

    def __init__(
        self,
        *,
        model: Model | None = None,
        instructions: str = SUMMARY_INSTRUCTIONS,
        max_tokens: int = 1024,
        keep_share: float = 0.5,
    ) -> None:
        self.model = model
        self.instructions = instructions
        self.max_tokens = max_tokens
        self.keep_share = keep_share

    def _cut(self, thread: Thread, job: CompactionJob, layout: _Layout) -> int:
        """How many of the layout's groups to summarise: the rest fits ``keep_share``."""
        if job.target is None:
            return len(layout.groups)
        room = int(job.target * self.keep_share)
        kept = sum(thread.sizes[: layout.head]) + sum(thread.sizes[layout.tail :])
        cut = len(layout.groups)
        while cut > 0:
            start, end = layout.groups[cut - 1]
            size = sum(thread.sizes[start:end])
            if kept + size > room:
                break
            kept += size
            cut -= 1
        return cut

    async def compact(self, thread: Thread, job: CompactionJob) -> Thread | None:
        """The thread with its oldest groups summarised, or ``None`` when there is nothing to
        summarise or the summary would not be shorter; raises when the call fails."""
        if job.complete is None:
            return None
        layout = _layout(thread.messages, job.keep_recent)
        chosen = layout.groups[: self._cut(thread, job, layout)]
        if not chosen:
            return None
        old = [m for start, end in chosen for m in thread.messages[start:end]]
        request = ModelRequest(
            messages=(
                Message.user(
                    f"{self.instructions}\n\n<conversation>\n{_transcript(old)}\n</conversation>"
                ),
            ),
            max_tokens=self.max_tokens,
        )
        response = await job.complete(request, self.model)
        if not isinstance(response, ModelResponse):
            raise MalformedResponseError("the summary call returned no ModelResponse")
        if response.finish_reason in (FinishReason.CONTENT_FILTER, FinishReason.ERROR):
            raise MalformedResponseError(
                f"the summary call finished with {response.finish_reason.value!r}"
            )
        text = response.message.text.strip()
        if not text:
            raise MalformedResponseError("the summary call returned no text")
        summary = Message.assistant(SUMMARY_HEADER + text)
        size = job.tokenizer(summary)
        if size >= sum(sum(thread.sizes[start:end]) for start, end in chosen):
            return None
        first = chosen[0][0]
        shorter = _without(thread, chosen)
        return Thread(
            (*shorter.messages[:first], summary, *shorter.messages[first:]),
            (*shorter.sizes[:first], size, *shorter.sizes[first:]),
        )


# -- the compactor ---------------------------------------------------------------------------
@record(kw_only=False)
class CompactionResult:
    """What a compaction did. Tokens are in the tokenizer's units; ``strategy`` names the
    strategies that changed something, joined by ``+`` (empty when none did); ``errors`` are
    the strategies that failed and were skipped."""

    messages: tuple[Message, ...]
    tokens_before: int
    tokens_after: int
    removed: int
    strategy: str
    errors: tuple[str, ...] = ()

    @property
    def changed(self) -> bool:
        """Some strategy shortened the history."""
        return bool(self.strategy)


class Compactor:
    """Runs its strategies in order until the history fits the job, counting with
    ``tokenizer``: the same tokenizer counts every message the run appends."""

    def __init__(
        self,
        strategies: Sequence[CompactionStrategy] = (TrimToolOutputs(), SlidingWindow()),
        *,
        tokenizer: Tokenizer = estimate_tokens,
    ) -> None:
        if not strategies:
            raise ValueError("a Compactor needs at least one strategy")
        self.strategies = tuple(strategies)
        self.tokenizer = tokenizer

    @classmethod
    def from_settings(
        cls, settings: CompactionSettings, *, tokenizer: Tokenizer = estimate_tokens
    ) -> Compactor:
        """The built-in strategies ``settings`` names, in its order."""
        built: dict[CompactionStrategyName, CompactionStrategy] = {
            CompactionStrategyName.TRIM_TOOL_OUTPUTS: TrimToolOutputs(
                settings.trim_tool_outputs_over
            ),
            CompactionStrategyName.SUMMARIZE: Summarize(
                instructions=settings.summary_prompt or SUMMARY_INSTRUCTIONS,
                max_tokens=settings.summary_max_tokens,
            ),
            CompactionStrategyName.SLIDING_WINDOW: SlidingWindow(),
        }
        return cls([built[name] for name in settings.strategies], tokenizer=tokenizer)

    def count(self, messages: Sequence[Message]) -> Thread:
        """``messages`` with their token counts, ready for :meth:`compact`."""
        return Thread.of(messages, self.tokenizer)

    async def compact(self, thread: Thread, job: CompactionJob) -> CompactionResult:
        """Shorten ``thread`` towards the job's goal. A model call cut short by the run's
        cancel or deadline propagates; any other failure of a strategy is recorded in
        ``errors`` and the next strategy runs."""
        before = thread
        used: list[str] = []
        errors: list[str] = []
        for strategy in self.strategies:
            if job.fits(thread.tokens, len(thread.messages)):
                break
            try:
                shorter = await strategy.compact(thread, job)
            except Interrupted:
                raise
            except Exception as exc:
                errors.append(f"{strategy.name}: {type(exc).__name__}: {exc}")
                continue
            if shorter is not None:
                thread = shorter
                used.append(strategy.name)
        return CompactionResult(
            messages=thread.messages,
            tokens_before=before.tokens,
            tokens_after=thread.tokens,
            removed=len(before.messages) - len(thread.messages),
            strategy="+".join(used),
            errors=tuple(errors),
        )
