"""fsm_agent: an LLM agent-loop kernel whose loop is an explicit finite-state machine.

Every run moves through the named states of :data:`fsm_agent.machine.table.TABLE`; the same
table drives the run, draws the diagram, and is explored by the checker and the fuzzer.

Read the package in this order (docs/machine.md draws the layers the imports follow):

1. :mod:`fsm_agent.machine`: what can happen (states, outcomes, each state's declaration, the
   rows, the guards) and the pure ``decide``; :mod:`fsm_agent.analysis`: what that guarantees
   (the bounds, the proof and the checker). :mod:`fsm_agent.policy` sets the limits the guards
   compare.
2. :mod:`fsm_agent.kernel`: the :class:`Agent`, the driver that walks the machine one move at a
   time, and one handler per state, the only place where effects happen.
3. What a run is: :mod:`fsm_agent.run` (its one serialisable state, the events a listener
   hears, approvals, a typed answer and its validation), :mod:`fsm_agent.errors` (the exception
   tree) and :mod:`fsm_agent.phases` (a task machine of phases, each offering its own tools).
4. The seams the kernel calls: :mod:`fsm_agent.values` (messages, model settings: cheap values
   validated at the edges), :mod:`fsm_agent.models` (the model protocol, and the scripted model
   that replay, the fuzzer and your tests use) and :mod:`fsm_agent.providers` (the model APIs);
   :mod:`fsm_agent.tools` (tools, with their output limits and MCP servers' tools);
   :mod:`fsm_agent.hooks` (your code at the seams); :mod:`fsm_agent.compaction` (the context
   budget).
5. Keeping runs: :mod:`fsm_agent.persistence` (checkpoints and the effect journal),
   :mod:`fsm_agent.conversation` (a conversation across runs), :mod:`fsm_agent.durable`
   (DBOS), :mod:`fsm_agent.replay` (record and replay, the children an agent tool ran included,
   and a replay compared with its recording).
6. Checking and showing: :mod:`fsm_agent.testing` (test doubles: the scripted model, the crash
   simulation, ``fuzz_agent``), :mod:`fsm_agent.fuzzing`, :mod:`fsm_agent.diagrams`,
   :mod:`fsm_agent.observability`, :mod:`fsm_agent.log` (the ``fsm_agent`` logger),
   :mod:`fsm_agent.redaction` (what is shown or kept without credentials),
   :mod:`fsm_agent.inspector` (stored runs in a browser) and :mod:`fsm_agent.cli`.

Modules that moved keep their old import paths as permanent aliases
(``fsm_agent.messages``, ``fsm_agent.events``, ``fsm_agent.mcp``, ``fsm_agent.scripted``, ...;
the table is :data:`fsm_agent._lazy.MOVED`): importing one gives the moved module itself.
"""

from types import FunctionType
from typing import TYPE_CHECKING

from ._lazy import facade, install_aliases

# The errors are bound at import (a module of plain classes, no imports): an exception or a
# span names its type ``fsm_agent.RateLimitError`` however the code that raised it was reached.
from .errors import (
    AgentToolError,
    AuthenticationError,
    CheckpointConflictError,
    CheckpointError,
    ConfigurationError,
    ContextWindowExceededError,
    CorruptCheckpointError,
    DefinitionChangedError,
    DefinitionError,
    DurableRunError,
    FsmAgentError,
    HandoffError,
    HookError,
    InvalidInputError,
    InvalidRequestError,
    MalformedResponseError,
    MCPServerError,
    MissingExtraError,
    ModelConnectionError,
    ModelError,
    ModelTimeoutError,
    OutputValidationError,
    PhaseDefinitionError,
    PolicyError,
    ProviderServerError,
    RateLimitError,
    ResumeError,
    RunAbandonedError,
    RunFinishedError,
    SchemaVersionError,
    StoreFullError,
    StoreLockedError,
    ToolDefinitionError,
    ToolExecutionError,
    UnknownRunError,
)

install_aliases()  # the old paths of moved modules import the modules at their new paths

if TYPE_CHECKING:
    from .analysis.bounds import Bounds
    from .analysis.checker import CheckReport, CheckVerdict, check
    from .compaction import (
        CompactionStrategy,
        Compactor,
        SlidingWindow,
        Summarize,
        Tokenizer,
        TrimToolOutputs,
        estimate_tokens,
    )
    from .conversation import Conversation
    from .diagrams import RenderingUnavailableError, TraceError
    from .durable import DurableRuns
    from .hooks import HookSet, MockResult, SkipTool
    from .kernel.agent import Agent, RunHandle, RunResult, Runtime, StopCondition, Verifier
    from .kernel.driver import UndeclaredOutcomeError
    from .kernel.handoffs import Handoff
    from .kernel.states import Verdict
    from .machine.agent_machine import AgentMachine, IllegalMoveError, Move, decide
    from .machine.table import Counters, Limits, Outcome, State, StopReason
    from .models import Model, ModelChain, StreamingModel
    from .persistence import (
        Checkpoint,
        Checkpointer,
        Durability,
        InMemoryCheckpointer,
        RunSummary,
        open_checkpointer,
    )
    from .persistence.postgres import PostgresCheckpointer
    from .persistence.sqlite import SQLiteCheckpointer
    from .phases import MovePhase, Phase, Phases, PhaseView, Transition
    from .policy import (
        CompactionSettings,
        HookFailureMode,
        LoopGuardAction,
        Policy,
        RetryPolicy,
        ToolFailureMode,
        ToolOutputSettings,
        UsageLimits,
    )
    from .providers import (
        AnthropicModel,
        FallbackModel,
        GeminiModel,
        OpenAIChatModel,
        OpenAIResponsesModel,
        infer_model,
    )
    from .replay import ReplayReport
    from .run.approval import Approval, Decision, HumanDecision, ResumeHandle
    from .run.events import Event
    from .run.state import AgentUsage, HumanRequest, RunState
    from .tools import HumanInputRequired, TaskComplete, Tool, ToolContext, ToolReturn, tool
    from .values.messages import (
        FinishReason,
        ImagePart,
        Message,
        ModelRequest,
        ModelResponse,
        ReasoningPart,
        ResourceLinkPart,
        Role,
        TextPart,
        ToolCall,
        ToolDefinition,
        ToolResult,
        Usage,
    )
    from .values.model_settings import ModelSettings

__version__: str  # the installed distribution's version, read on first use (see __getattr__)

# Every other public name loads on first use, with its module, from where the imports above
# (read by type checkers) take it: ``import fsm_agent`` (and every CLI start) imports no model
# type, kernel, provider, store or diagram. Functions named like their module (``bounds``,
# ``replay``) are not public names here: once the submodule is imported, ``fsm_agent.<name>``
# is the module, whatever this file binds.
__all__ = [
    "Agent",
    "AgentMachine",
    "AgentToolError",
    "AgentUsage",
    "AnthropicModel",
    "Approval",
    "AuthenticationError",
    "Bounds",
    "CheckReport",
    "CheckVerdict",
    "Checkpoint",
    "CheckpointConflictError",
    "CheckpointError",
    "Checkpointer",
    "CompactionSettings",
    "CompactionStrategy",
    "Compactor",
    "ConfigurationError",
    "ContextWindowExceededError",
    "Conversation",
    "CorruptCheckpointError",
    "Counters",
    "Decision",
    "DefinitionChangedError",
    "DefinitionError",
    "Durability",
    "DurableRunError",
    "DurableRuns",
    "Event",
    "FallbackModel",
    "FinishReason",
    "FsmAgentError",
    "GeminiModel",
    "Handoff",
    "HandoffError",
    "HookError",
    "HookFailureMode",
    "HookSet",
    "HumanDecision",
    "HumanInputRequired",
    "HumanRequest",
    "IllegalMoveError",
    "ImagePart",
    "InMemoryCheckpointer",
    "InvalidInputError",
    "InvalidRequestError",
    "Limits",
    "LoopGuardAction",
    "MCPServerError",
    "MalformedResponseError",
    "Message",
    "MissingExtraError",
    "MockResult",
    "Model",
    "ModelChain",
    "ModelConnectionError",
    "ModelError",
    "ModelRequest",
    "ModelResponse",
    "ModelSettings",
    "ModelTimeoutError",
    "Move",
    "MovePhase",
    "OpenAIChatModel",
    "OpenAIResponsesModel",
    "Outcome",
    "OutputValidationError",
    "Phase",
    "PhaseDefinitionError",
    "PhaseView",
    "Phases",
    "Policy",
    "PolicyError",
    "PostgresCheckpointer",
    "ProviderServerError",
    "RateLimitError",
    "ReasoningPart",
    "RenderingUnavailableError",
    "ReplayReport",
    "ResourceLinkPart",
    "ResumeError",
    "ResumeHandle",
    "RetryPolicy",
    "Role",
    "RunAbandonedError",
    "RunFinishedError",
    "RunHandle",
    "RunResult",
    "RunState",
    "RunSummary",
    "Runtime",
    "SQLiteCheckpointer",
    "SchemaVersionError",
    "SkipTool",
    "SlidingWindow",
    "State",
    "StopCondition",
    "StopReason",
    "StoreFullError",
    "StoreLockedError",
    "StreamingModel",
    "Summarize",
    "TaskComplete",
    "TextPart",
    "Tokenizer",
    "Tool",
    "ToolCall",
    "ToolContext",
    "ToolDefinition",
    "ToolDefinitionError",
    "ToolExecutionError",
    "ToolFailureMode",
    "ToolOutputSettings",
    "ToolResult",
    "ToolReturn",
    "TraceError",
    "Transition",
    "TrimToolOutputs",
    "UndeclaredOutcomeError",
    "UnknownRunError",
    "Usage",
    "UsageLimits",
    "Verdict",
    "Verifier",
    "check",
    "decide",
    "estimate_tokens",
    "infer_model",
    "open_checkpointer",
    "tool",
]


def _adopt(value: object) -> None:
    """Make ``value`` read as ``fsm_agent.<name>`` in reprs. Types validated by pydantic (a
    model, a :class:`~fsm_agent.values.record.Record`) keep their home module: pydantic
    resolves their annotations there."""
    if (isinstance(value, type) and not hasattr(value, "model_validate")) or isinstance(
        value, FunctionType
    ):
        value.__module__ = __name__


for _name in __all__:
    if _name in globals():  # an error, bound above
        _adopt(globals()[_name])
del _name

_public_name, _names = facade(globals(), adopt=_adopt)


def __getattr__(name: str) -> object:
    """A public name, imported with its module on first use (PEP 562); a submodule's name
    imports the submodule (``fsm_agent.policy.Policy`` after ``import fsm_agent`` works as it
    did when the import loaded the kernel)."""
    if name == "__version__":
        return _installed_version()
    return _public_name(name)


def __dir__() -> list[str]:
    """The module's names, the public ones not yet loaded included."""
    return sorted({*_names(), "__version__"})


def _installed_version() -> str:
    """The version of the installed distribution (``__version__``): one source, the metadata."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("fsm_agent")
    except PackageNotFoundError:  # imported from a source tree that was never installed
        return "0+unknown"
