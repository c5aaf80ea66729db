"""Adapters that run the workload on peer frameworks, each over a scripted model of its own.

Each scripted model is stateless: it reads the last ``add`` result from the history the
framework sends it and answers with :func:`workload.next_call`, so one agent serves every run
of a given length. Like fsm_agent's ``ScriptedModel``, the asynchronous ones yield to the event
loop once per call. Each adapter imports its framework when it is built: an adapter whose
framework is not installed raises ``ImportError`` there, and the runner skips it.
"""

from __future__ import annotations

import asyncio
from typing import Any

from workload import ANSWER, PROMPT, SYSTEM_PROMPT, Adapter, Call, Run, add, next_call


def tool_calling_graph(model: Any) -> Any:
    """LangGraph's tool-calling loop over ``model`` (a chat model bound to ``add``): the graph
    every LangGraph measurement runs, in-process here and over HTTP in ``http_path.py``."""
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition

    async def agent(state: MessagesState) -> dict[str, list[Any]]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode([add]))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    return builder.compile()


class SharedAgentAdapter(Adapter):
    """An adapter whose runs of one length share one agent (its scripted model is stateless)."""

    def __init__(self) -> None:
        self._shared: dict[int, Any] = {}

    def shared(self, steps: int) -> Any:
        """The agent for runs of ``steps`` steps, built by :meth:`start` on first use."""
        if steps not in self._shared:
            self._shared[steps] = self.start(steps)
        return self._shared[steps]


class PydanticAIAdapter(SharedAgentAdapter):
    """pydantic-ai: an ``Agent`` over a ``FunctionModel``."""

    name = "pydantic-ai"
    distributions = ("pydantic-ai-slim",)

    def __init__(self) -> None:
        from pydantic_ai import Agent, UsageLimits
        from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart
        from pydantic_ai.models.function import FunctionModel

        def model(steps: int) -> FunctionModel:
            async def answer(messages: list[Any], info: Any) -> ModelResponse:
                await asyncio.sleep(0)
                returns = [p for p in messages[-1].parts if isinstance(p, ToolReturnPart)]
                call = next_call(int(returns[-1].content) if returns else None, steps)
                if call is None:
                    return ModelResponse(parts=[TextPart(ANSWER)])
                return ModelResponse(parts=[ToolCallPart("add", call.args, tool_call_id=call.id)])

            return FunctionModel(answer)

        self._build = lambda steps: Agent(model(steps), tools=[add], system_prompt=SYSTEM_PROMPT)
        self._limits = UsageLimits(request_limit=None)
        super().__init__()

    def start(self, steps: int) -> object:
        """An ``Agent`` with the ``add`` tool and a system prompt."""
        return self._build(steps)

    def prepare(self, steps: int) -> Run:
        """The shared agent's ``run``, without the default limit on requests."""
        agent = self.shared(steps)

        async def run() -> str:
            result = await agent.run(PROMPT, usage_limits=self._limits)
            return str(result.output)

        return run


class LangGraphAdapter(SharedAgentAdapter):
    """LangGraph: the tool-calling graph (a model node, a ``ToolNode``, ``tools_condition``)
    over a LangChain chat model that supports tools."""

    name = "LangGraph"
    distributions = ("langgraph", "langchain-core")

    def __init__(self) -> None:
        from langchain_core.language_models.chat_models import BaseChatModel
        from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
        from langchain_core.outputs import ChatGeneration, ChatResult

        class ScriptedChatModel(BaseChatModel):
            steps: int

            @property
            def _llm_type(self) -> str:
                return "scripted"

            def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedChatModel:
                return self

            def _generate(self, messages: list[Any], *args: Any, **kwargs: Any) -> ChatResult:
                last = messages[-1]
                call = next_call(
                    int(last.content) if isinstance(last, ToolMessage) else None, self.steps
                )
                if call is None:
                    message = AIMessage(content=ANSWER)
                else:
                    message = AIMessage(
                        content="",
                        tool_calls=[{"name": "add", "args": call.args, "id": call.id}],
                    )
                return ChatResult(generations=[ChatGeneration(message=message)])

            async def _agenerate(
                self, messages: list[Any], *args: Any, **kwargs: Any
            ) -> ChatResult:
                await asyncio.sleep(0)
                return self._generate(messages)

        def graph(steps: int) -> Any:
            return tool_calling_graph(ScriptedChatModel(steps=steps).bind_tools([add]))

        self._build = graph
        self._input = lambda: {"messages": [SystemMessage(SYSTEM_PROMPT), HumanMessage(PROMPT)]}
        super().__init__()

    def start(self, steps: int) -> object:
        """The compiled graph."""
        return self._build(steps)

    def prepare(self, steps: int) -> Run:
        """The shared graph's ``ainvoke``, with room for every step."""
        graph = self.shared(steps)
        config = {"recursion_limit": 2 * steps + 5}

        async def run() -> str:
            result = await graph.ainvoke(self._input(), config)
            return str(result["messages"][-1].content)

        return run


class OpenAIAgentsAdapter(SharedAgentAdapter):
    """openai-agents: an ``Agent`` over a custom ``Model``, run by ``Runner`` (tracing off)."""

    name = "openai-agents"
    distributions = ("openai-agents",)

    def __init__(self) -> None:
        from agents import (
            Agent,
            Model,
            ModelResponse,
            Runner,
            Usage,
            function_tool,
            set_tracing_disabled,
        )
        from openai.types.responses import (
            ResponseFunctionToolCall,
            ResponseOutputMessage,
            ResponseOutputText,
        )

        set_tracing_disabled(True)

        def output(call: Call | None) -> Any:
            if call is None:
                return ResponseOutputMessage(
                    id="answer",
                    type="message",
                    role="assistant",
                    status="completed",
                    content=[ResponseOutputText(text=ANSWER, type="output_text", annotations=[])],
                )
            return ResponseFunctionToolCall(
                id=call.id,
                call_id=call.id,
                type="function_call",
                name="add",
                arguments=f'{{"a": {call.a}, "b": 1}}',
            )

        class ScriptedModel(Model):
            def __init__(self, steps: int) -> None:
                self.steps = steps

            async def get_response(
                self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any
            ) -> ModelResponse:
                await asyncio.sleep(0)
                last = input[-1] if isinstance(input, list) else None
                result = (
                    int(last["output"])
                    if isinstance(last, dict) and last.get("type") == "function_call_output"
                    else None
                )
                return ModelResponse(
                    output=[output(next_call(result, self.steps))], usage=Usage(), response_id=None
                )

            def stream_response(self, *args: Any, **kwargs: Any) -> Any:
                raise NotImplementedError("the workload does not stream")

        tool = function_tool(add)
        self._build = lambda steps: Agent(
            name="bench", instructions=SYSTEM_PROMPT, model=ScriptedModel(steps), tools=[tool]
        )
        self._runner = Runner
        super().__init__()

    def start(self, steps: int) -> object:
        """An ``Agent`` with the ``add`` tool and instructions."""
        return self._build(steps)

    def prepare(self, steps: int) -> Run:
        """``Runner.run`` on the shared agent, with room for every step."""
        agent = self.shared(steps)

        async def run() -> str:
            result = await self._runner.run(agent, PROMPT, max_turns=steps + 5)
            return str(result.final_output)

        return run


class SmolagentsAdapter(SharedAgentAdapter):
    """smolagents: a ``ToolCallingAgent`` over a scripted ``Model``; the answer is a
    ``final_answer`` tool call. Synchronous: its runs cannot share an event loop."""

    name = "smolagents"
    distributions = ("smolagents",)
    concurrent = False

    def __init__(self) -> None:
        from smolagents import LogLevel, Model, ToolCallingAgent, tool
        from smolagents.models import (
            ChatMessage,
            ChatMessageToolCall,
            ChatMessageToolCallFunction,
            MessageRole,
        )

        def tool_call(name: str, arguments: dict[str, Any], id: str) -> ChatMessageToolCall:
            function = ChatMessageToolCallFunction(name=name, arguments=arguments)
            return ChatMessageToolCall(function=function, id=id, type="function")

        class ScriptedModel(Model):
            def __init__(self, steps: int) -> None:
                super().__init__(model_id="scripted")
                self.steps = steps

            def generate(self, messages: list[Any], *args: Any, **kwargs: Any) -> ChatMessage:
                last = messages[-1]
                result = None
                if last.role == MessageRole.TOOL_RESPONSE:  # "Observation:\n<result>"
                    result = int(last.content[-1]["text"].rsplit(None, 1)[-1])
                call = next_call(result, self.steps)
                if call is None:
                    turn = tool_call("final_answer", {"answer": ANSWER}, "answer")
                else:
                    turn = tool_call("add", call.args, call.id)
                return ChatMessage(role=MessageRole.ASSISTANT, content="", tool_calls=[turn])

        add_tool = tool(add)
        self._build = lambda steps: ToolCallingAgent(
            tools=[add_tool],
            model=ScriptedModel(steps),
            instructions=SYSTEM_PROMPT,
            max_steps=steps + 5,
            verbosity_level=LogLevel.OFF,
        )
        super().__init__()

    def start(self, steps: int) -> object:
        """A ``ToolCallingAgent`` with the ``add`` tool, quiet."""
        return self._build(steps)

    def prepare(self, steps: int) -> Run:
        """The shared agent's ``run`` (it resets the agent's memory first)."""
        agent = self.shared(steps)

        async def run() -> str:
            return str(agent.run(PROMPT))

        return run


PEERS: tuple[type[Adapter], ...] = (
    PydanticAIAdapter,
    LangGraphAdapter,
    OpenAIAgentsAdapter,
    SmolagentsAdapter,
)
