"""The exception tree of fsm_agent.

Every error the library raises derives from :class:`FsmAgentError`::

    FsmAgentError
    ├── DefinitionError            the transition table is malformed (raised when it is built)
    ├── ConfigurationError         a value given to the library is wrong (raised at construction)
    │   ├── PolicyError            a Policy / RetryPolicy value is invalid
    │   ├── ToolDefinitionError    a tool cannot be built (no type hints, duplicate name, ...)
    │   ├── InvalidInputError      run input that cannot start a run (empty prompt, ...)
    │   ├── PhaseDefinitionError   a phase table is malformed or names unknown tools (phases)
    │   └── MissingExtraError      an optional dependency is not installed (also an ImportError)
    ├── ModelError                 a model call failed (kept on the RunResult, drives retries)
    │   ├── RateLimitError         429; may carry retry_after
    │   ├── ProviderServerError    5xx / overloaded
    │   ├── ModelTimeoutError      the call or the stream went quiet for too long
    │   ├── ModelConnectionError   the connection failed or was reset
    │   ├── AuthenticationError    401 / 403: never retried
    │   ├── InvalidRequestError    400 / 404 / 422: never retried
    │   ├── ContextWindowExceededError  the prompt does not fit: the kernel treats it as length
    │   └── MalformedResponseError the model returned something that is not a valid response
    ├── ToolExecutionError         tools failed and the run aborted on it (tool_failure_mode="fail",
    │                              or failed tool turns reached an error limit)
    ├── AgentToolError             an agent used as a tool stopped without an answer (a result
    │                              its parent's model reads)
    ├── HandoffError               a handoff's input filter failed (the run aborts on it)
    ├── MCPServerError             an MCP server failed a call or went away (fsm_agent.tools.mcp)
    ├── HookError                  a hook raised or overran (kept when the policy aborts on it)
    ├── OutputValidationError      the answer did not validate as the output type (kept on the
    │                              RunResult of a run that ended output_invalid)
    ├── DurableRunError            a run on DBOS failed or is unknown (fsm_agent.durable)
    ├── RunAbandonedError          an operator abandoned the stored run (kept on its RunResult)
    ├── ResumeError                a resume handle is unknown, already used, or does not fit
    │   ├── UnknownRunError        no checkpoint holds the run id
    │   ├── RunFinishedError       the run already ended: there is nothing to resume
    │   └── DefinitionChangedError the agent resuming a run is not the one that started it
    └── CheckpointError            the checkpoint store failed; what it holds is left as it was
        ├── CheckpointConflictError  another worker wrote the run first (optimistic concurrency)
        ├── CorruptCheckpointError   a stored row does not decode (damaged or truncated)
        ├── SchemaVersionError       the store was written by a newer fsm_agent
        ├── StoreLockedError         the store stayed locked by another writer past the timeout
        └── StoreFullError           the disk (or the store's size limit) is full

Control-flow signals such as :class:`fsm_agent.TaskComplete` are not errors and do not derive
from this tree; nor does :class:`Interrupted`, the kernel's signal that the run's own cancel or
deadline cut an effect short (it lives here so that the modules below the kernel, such as
compaction, can let it through).
"""

from __future__ import annotations

__all__ = [
    "AgentToolError",
    "AuthenticationError",
    "CheckpointConflictError",
    "CheckpointError",
    "ConfigurationError",
    "ContextWindowExceededError",
    "CorruptCheckpointError",
    "DefinitionChangedError",
    "DefinitionError",
    "DurableRunError",
    "FsmAgentError",
    "HandoffError",
    "HookError",
    "InvalidInputError",
    "InvalidRequestError",
    "MCPServerError",
    "MalformedResponseError",
    "MissingExtraError",
    "ModelConnectionError",
    "ModelError",
    "ModelTimeoutError",
    "OutputValidationError",
    "PhaseDefinitionError",
    "PolicyError",
    "ProviderServerError",
    "RateLimitError",
    "ResumeError",
    "RunAbandonedError",
    "RunFinishedError",
    "SchemaVersionError",
    "StoreFullError",
    "StoreLockedError",
    "ToolDefinitionError",
    "ToolExecutionError",
    "UnknownRunError",
]


class FsmAgentError(Exception):
    """Root of every error raised by fsm_agent."""


class DefinitionError(FsmAgentError):
    """The transition table is malformed; ``faults`` lists every problem found at once."""

    def __init__(self, faults: list[str]) -> None:
        self.faults = list(faults)
        lines = "\n".join(f"  - {fault}" for fault in self.faults)
        super().__init__(f"the transition table has {len(self.faults)} fault(s):\n{lines}")


class ConfigurationError(FsmAgentError):
    """A value passed to the library cannot work; the message says what to change."""


class PolicyError(ConfigurationError):
    """A :class:`~fsm_agent.Policy` or :class:`~fsm_agent.RetryPolicy` value is invalid."""


class ToolDefinitionError(ConfigurationError):
    """A tool cannot be built or registered."""


class PhaseDefinitionError(ConfigurationError):
    """A phase table (:class:`fsm_agent.phases.Phases`) is malformed, or names tools the agent
    does not have; raised when it (or the agent) is built, listing every fault."""


class InvalidInputError(ConfigurationError):
    """The input given to a run cannot start it."""


class MissingExtraError(ConfigurationError, ImportError):
    """A feature needs an optional dependency that is not installed. The message names the extra
    that brings it and how to install it; ``extra`` is its name. Also an :class:`ImportError`,
    so code that guards an optional import keeps working."""

    def __init__(self, feature: str, *, extra: str, module: str) -> None:
        super().__init__(
            f"{feature} needs {module}, which the [{extra}] extra installs: "
            f"pip install -e '.[{extra}]' in a checkout of fsm_agent"
        )
        self.extra = extra


class ModelError(FsmAgentError):
    """A model call failed.

    ``retryable`` says whether the kernel may try the call again (subject to the retry policy);
    ``retry_after`` is the delay in seconds the server asked for, when it asked.
    ``status_code`` and ``body`` carry the HTTP context when there was one.
    """

    default_retryable = False

    def __init__(
        self,
        message: str,
        *,
        retryable: bool | None = None,
        retry_after: float | None = None,
        status_code: int | None = None,
        body: str | None = None,
        provider: str | None = None,
    ) -> None:
        super().__init__(message)
        self.retryable = self.default_retryable if retryable is None else retryable
        self.retry_after = retry_after
        self.status_code = status_code
        self.body = body
        self.provider = provider


class RateLimitError(ModelError):
    """The provider rate-limited the call (HTTP 429)."""

    default_retryable = True


class ProviderServerError(ModelError):
    """The provider failed on its side (HTTP 5xx, overloaded)."""

    default_retryable = True


class ModelTimeoutError(ModelError):
    """The call, or the gap between two stream chunks, took longer than its timeout."""

    default_retryable = True


class ModelConnectionError(ModelError):
    """The connection could not be made or was dropped."""

    default_retryable = True


class AuthenticationError(ModelError):
    """The credentials were refused (HTTP 401/403); fix the API key, retrying cannot help."""


class InvalidRequestError(ModelError):
    """The provider rejected the request as malformed (HTTP 400/404/422)."""


class ContextWindowExceededError(InvalidRequestError):
    """The request does not fit the model's context window; the kernel compacts and tries again."""


class MalformedResponseError(ModelError):
    """The model returned something that is not a valid response (retryable: it may pass)."""

    default_retryable = True


class ToolExecutionError(FsmAgentError):
    """Tools failed and the run ended on it: a tool failed under the policy's
    ``tool_failure_mode="fail"`` (stop reason ``tool_error``), or every call of a turn failed
    and the failed turns reached ``max_consecutive_errors`` or ``max_total_errors`` (stop
    reason ``max_errors``). ``tool_name`` and ``call_id`` name the failed call it reports."""

    def __init__(self, message: str, *, tool_name: str, call_id: str) -> None:
        super().__init__(message)
        self.tool_name = tool_name
        self.call_id = call_id


class AgentToolError(FsmAgentError):
    """An agent used as a tool (``Agent.as_tool``) stopped without finishing its task (its step
    limit, an abort, a usage limit), or was not run because the parent's limits are spent. The
    call's result carries the message, which the parent's model can act on; ``result`` is the
    child's :class:`~fsm_agent.RunResult` when it ran."""

    def __init__(self, message: str, *, tool_name: str, result: object = None) -> None:
        super().__init__(message)
        self.tool_name = tool_name
        self.result = result


class HandoffError(FsmAgentError):
    """A handoff could not give the conversation to its target: the handoff's ``input_filter``
    raised or returned a history that is not valid (not messages, or a tool call without its one
    result). The run ends ``aborted`` with stop reason ``tool_error`` and this error, rather
    than hand the target a conversation its filter did not approve; ``handoff`` names it."""

    def __init__(self, message: str, *, handoff: str) -> None:
        super().__init__(message)
        self.handoff = handoff


class MCPServerError(FsmAgentError):
    """An MCP server answered a tool call with an error, or could not be reached, or went away
    during the call. A tool call that meets it gets an ``is_error`` result carrying the message,
    which the model can act on; ``server`` names the server and ``tool`` the tool (when known)."""

    def __init__(self, message: str, *, server: str, tool: str | None = None) -> None:
        super().__init__(message)
        self.server = server
        self.tool = tool


class HookError(FsmAgentError):
    """A hook raised or overran its timeout."""

    def __init__(self, message: str, *, hook: str) -> None:
        super().__init__(message)
        self.hook = hook


class OutputValidationError(FsmAgentError):
    """The final answer did not validate as the agent's output type, and the verification
    budget to ask again is spent. ``feedback`` is what the model was last told."""

    def __init__(self, message: str, *, feedback: str) -> None:
        super().__init__(message)
        self.feedback = feedback


class RunAbandonedError(FsmAgentError):
    """The stored run was abandoned (:meth:`~fsm_agent.Agent.abandon`): it ended ``aborted``
    with ``cancelled``, and ``reason`` is why the operator ended it."""

    def __init__(self, message: str, *, run_id: str, reason: str) -> None:
        super().__init__(message)
        self.run_id = run_id
        self.reason = reason


class ResumeError(FsmAgentError):
    """A run cannot be resumed: unknown or already-used handle, or decisions that do not fit."""


class UnknownRunError(ResumeError):
    """No checkpoint holds this run id: it was never saved in this store (or under this name)."""

    def __init__(self, message: str, *, run_id: str) -> None:
        super().__init__(message)
        self.run_id = run_id


class RunFinishedError(ResumeError):
    """The run already ended (``done`` or ``aborted``); its stored result stays as it is."""

    def __init__(self, message: str, *, run_id: str) -> None:
        super().__init__(message)
        self.run_id = run_id


class DefinitionChangedError(ResumeError):
    """The agent resuming a stored run differs from the one that started it (its tools, their
    schemas, the system prompt or the policy); nothing ran and nothing was written."""

    def __init__(self, message: str, *, run_id: str, changed: tuple[str, ...]) -> None:
        super().__init__(message)
        self.run_id = run_id
        self.changed = changed


class CheckpointError(FsmAgentError):
    """The checkpoint store could not do what was asked. Nothing it already held is changed:
    a failed write leaves the last good checkpoint in place."""


class CheckpointConflictError(CheckpointError):
    """Another worker wrote this run first: the checkpoint version this worker holds is no
    longer the latest. This worker must stop; the other one owns the run."""

    def __init__(self, message: str, *, run_id: str, version: int) -> None:
        super().__init__(message)
        self.run_id = run_id
        self.version = version


class CorruptCheckpointError(CheckpointError):
    """A stored checkpoint or effect record does not decode (damaged or truncated data)."""


class SchemaVersionError(CheckpointError):
    """The store's schema is newer than this version of fsm_agent understands; upgrade it."""


class StoreLockedError(CheckpointError):
    """The store stayed locked by another writer for longer than the checkpointer's timeout."""


class StoreFullError(CheckpointError):
    """The disk, or the store's size limit, is full; the write that hit it was not made."""


class DurableRunError(FsmAgentError):
    """A run on DBOS (:mod:`fsm_agent.durable`) could not be started or finished: its agent is
    not registered in the worker, its workflow failed, or its result is not there yet. The
    message says which; ``run_id`` names the run."""

    def __init__(self, message: str, *, run_id: str | None = None) -> None:
        super().__init__(message)
        self.run_id = run_id


class Interrupted(Exception):
    """An effect was cut short by the run's interrupt (cancel or deadline): the kernel raises
    it and turns it into the interrupt's outcome. Not an error, and not for user code to
    raise."""
