"""fsm_agent: an LLM agent-loop kernel whose loop is an explicit finite-state machine.

Every run moves through the named states of :data:`fsm_agent.machine.table.TABLE`; the same
table drives the run, draws the diagram, and is explored by the checker and the fuzzer.

Read the package in this order (docs/machine.md draws the layers the imports follow):

1. :mod:`fsm_agent.machine`: what can happen (states, outcomes, each state's declaration, the
   rows, the guards) and the pure ``decide``; the bounds, the proof and the checker.
   :mod:`fsm_agent.policy` sets the limits the guards compare.
2. :mod:`fsm_agent.kernel`: the :class:`Agent`, the driver that walks the machine one move at a
   time, and one handler per state, the only place where effects happen.
3. What a run is: :mod:`fsm_agent.run_state` (its one serialisable state),
   :mod:`fsm_agent.events` (what a listener hears), :mod:`fsm_agent.errors` (the exception
   tree), :mod:`fsm_agent.output` (a typed answer and its validation) and
   :mod:`fsm_agent.phases` (a task machine of phases, each offering its own tools).
4. The seams the kernel calls: :mod:`fsm_agent.messages` (cheap values on
   :mod:`fsm_agent.record`, with :mod:`fsm_agent.deep_json` for arguments nested too deep for
   ``json``), :mod:`fsm_agent.models`,
   :mod:`fsm_agent.model_settings` and :mod:`fsm_agent.providers` (the model);
   :mod:`fsm_agent.tools`, :mod:`fsm_agent.mcp` and :mod:`fsm_agent.tool_output` (tools);
   :mod:`fsm_agent.hooks` and :mod:`fsm_agent.approval` (your code at the seams);
   :mod:`fsm_agent.compaction` (the context budget).
5. Keeping runs: :mod:`fsm_agent.persistence` (checkpoints and the effect journal),
   :mod:`fsm_agent.conversation` (a conversation across runs), :mod:`fsm_agent.durable`
   (DBOS), :mod:`fsm_agent.replay` (record and replay; :mod:`fsm_agent.replay_children` for
   the runs an agent tool ran, :mod:`fsm_agent.replay_compare` for a replay against its
   recording).
6. Checking and showing: :mod:`fsm_agent.scripted` and :mod:`fsm_agent.testing` (test doubles,
   crash simulation), :mod:`fsm_agent.fuzzing`, :mod:`fsm_agent.diagrams`,
   :mod:`fsm_agent.observability`, :mod:`fsm_agent.log` (the ``fsm_agent`` logger),
   :mod:`fsm_agent.redaction` (what is shown or kept without credentials),
   :mod:`fsm_agent.inspector` (stored runs in a browser) and :mod:`fsm_agent.cli`.
"""

from importlib import import_module
from inspect import isfunction
from typing import TYPE_CHECKING

from pydantic import BaseModel

from .approval import Approval, Decision, HumanDecision, ResumeHandle
from .compaction import (
    CompactionStrategy,
    Compactor,
    SlidingWindow,
    Summarize,
    Tokenizer,
    TrimToolOutputs,
    estimate_tokens,
)
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
from .events import Event
from .hooks import HookSet, MockResult, SkipTool
from .kernel.agent import Agent, RunHandle, RunResult, Runtime, StopCondition, Verifier
from .kernel.driver import UndeclaredOutcomeError
from .kernel.states import Verdict
from .machine.agent_machine import AgentMachine, IllegalMoveError, Move, decide
from .machine.table import Counters, Limits, Outcome, State, StopReason
from .messages import (
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
from .model_settings import ModelSettings
from .models import Model, ModelChain, StreamingModel
from .persistence import (
    Checkpoint,
    Checkpointer,
    Durability,
    InMemoryCheckpointer,
    RunSummary,
    open_checkpointer,
)
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
from .record import Record
from .run_state import HumanRequest, RunState
from .tools import HumanInputRequired, TaskComplete, Tool, ToolContext, ToolReturn, tool

if TYPE_CHECKING:
    from .conversation import Conversation
    from .diagrams import RenderingUnavailableError, TraceError
    from .machine.bounds import Bounds
    from .machine.checker import CheckReport, CheckVerdict, check
    from .persistence.postgres import PostgresCheckpointer
    from .persistence.sqlite import SQLiteCheckpointer
    from .providers import (
        AnthropicModel,
        FallbackModel,
        GeminiModel,
        OpenAIChatModel,
        OpenAIResponsesModel,
        infer_model,
    )
    from .replay import ReplayReport

__version__: str  # the installed distribution's version, read on first use (see __getattr__)

# Functions named like their module (``bounds``, ``replay``) are not re-exported here: once the
# submodule is imported, ``fsm_agent.<name>`` is the module, whatever this file binds.
_LAZY = {
    "AnthropicModel": "providers",
    "Bounds": "machine.bounds",
    "CheckReport": "machine.checker",
    "CheckVerdict": "machine.checker",
    "Conversation": "conversation",
    "DurableRuns": "durable",
    "FallbackModel": "providers",
    "GeminiModel": "providers",
    "OpenAIChatModel": "providers",
    "OpenAIResponsesModel": "providers",
    "PostgresCheckpointer": "persistence.postgres",
    "RenderingUnavailableError": "diagrams",
    "ReplayReport": "replay",
    "SQLiteCheckpointer": "persistence.sqlite",
    "TraceError": "diagrams",
    "check": "machine.checker",
    "infer_model": "providers",
}

__all__ = [
    "Agent",
    "AgentMachine",
    "AgentToolError",
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

# Reprs read ``fsm_agent.Agent``. Pydantic models and records keep their home module: pydantic
# resolves their annotations there when it builds their validators.
for _name in __all__:
    if _name in _LAZY:
        continue
    _value = globals()[_name]
    if (isinstance(_value, type) and not issubclass(_value, BaseModel | Record)) or isfunction(
        _value
    ):
        _value.__module__ = __name__
del _name, _value


def __getattr__(name: str) -> object:
    # The providers, the diagrams and the checker load on first use: `import fsm_agent` (and
    # every CLI start) stays cheap for code that needs only the kernel.
    if name == "__version__":
        return _installed_version()
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'fsm_agent' has no attribute {name!r}")
    value = getattr(import_module(f"fsm_agent.{module}"), name)
    globals()[name] = value
    return value


def _installed_version() -> str:
    """The version of the installed distribution (``__version__``): one source, the metadata."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("fsm_agent")
    except PackageNotFoundError:  # imported from a source tree that was never installed
        return "0+unknown"
