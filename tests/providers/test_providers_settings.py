"""Model settings and prompt caching on the wire: what each provider sends for an agent's
settings, and Anthropic's cache breakpoints, asserted on the bodies a strict loopback server
received (it rejects what the APIs reject, cache breakpoints included)."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Callable
from typing import Any

import pytest

from conftest_network import no_external_network  # noqa: F401
from fsm_agent import Agent, ModelSettings, Policy, tool
from fsm_agent.providers import (
    AnthropicModel,
    FallbackModel,
    GeminiModel,
    OpenAIChatModel,
    OpenAIResponsesModel,
)
from fsm_agent.providers._anthropic_cache import mark_cache_breakpoints
from fsm_agent.testing import ScriptedModel, fail, text
from provider_server import (
    FAST,
    ProviderServer,
    Reply,
    Turn,
    anthropic_json,
    gemini_json,
    json_reply,
    openai_json,
)
from responses_wire import responses_json

KEY = "sk-settings-0123456789abcdef"
SETTINGS = ModelSettings(
    max_tokens=321, temperature=0.25, top_p=0.75, seed=42, stop_sequences=["END"]
)
EPHEMERAL = {"type": "ephemeral"}

MAKERS: dict[str, Callable[[str], Any]] = {
    "openai": lambda url: OpenAIChatModel("m", base_url=url, api_key=KEY, timeouts=FAST),
    "openai-responses": lambda url: OpenAIResponsesModel(
        "m", base_url=url, api_key=KEY, timeouts=FAST
    ),
    "anthropic": lambda url: AnthropicModel("m", base_url=url, api_key=KEY, timeouts=FAST),
    "gemini": lambda url: GeminiModel("m", base_url=url, api_key=KEY, timeouts=FAST),
}
WHOLE: dict[str, Callable[[Turn], Any]] = {
    "openai": openai_json,
    "openai-responses": responses_json,
    "anthropic": anthropic_json,
    "gemini": gemini_json,
}
EXPECTED: dict[str, Callable[[Any], dict[str, Any]]] = {
    "openai": lambda body: {
        k: body.get(k) for k in ("max_tokens", "temperature", "top_p", "seed", "stop")
    },
    "openai-responses": lambda body: {
        k: body.get(k) for k in ("max_output_tokens", "temperature", "top_p", "seed", "stop")
    },
    "anthropic": lambda body: {
        k: body.get(k) for k in ("max_tokens", "temperature", "top_p", "seed", "stop_sequences")
    },
    "gemini": lambda body: {
        k: body["generationConfig"].get(k)
        for k in ("maxOutputTokens", "temperature", "topP", "seed", "stopSequences")
    },
}
SENT = {
    "openai": {"max_tokens": 321, "temperature": 0.25, "top_p": 0.75, "seed": 42, "stop": ["END"]},
    # The Responses API has neither stop sequences nor a seed: both are left out.
    "openai-responses": {
        "max_output_tokens": 321,
        "temperature": 0.25,
        "top_p": 0.75,
        "seed": None,
        "stop": None,
    },
    # Anthropic has no seed: it is left out, so a fallback chain can share the settings.
    "anthropic": {
        "max_tokens": 321,
        "temperature": 0.25,
        "top_p": 0.75,
        "seed": None,
        "stop_sequences": ["END"],
    },
    "gemini": {
        "maxOutputTokens": 321,
        "temperature": 0.25,
        "topP": 0.75,
        "seed": 42,
        "stopSequences": ["END"],
    },
}


@tool
def lookup(q: str) -> str:
    """Look a word up."""
    return f"{q}: a state machine"


def _run(
    build: Callable[[str], Agent[Any, Any]], *replies: Reply, **run: Any
) -> tuple[Any, list[Any]]:
    """Run the agent ``build`` makes for the server's URL against a strict server scripted
    with ``replies``; the result and the request bodies."""

    async def go() -> tuple[Any, list[Any]]:
        async with ProviderServer().script(*replies) as server:
            agent = build(server.url)
            try:
                result = await agent.run("What is fsm?", **run)
            finally:
                await agent.model.aclose()  # type: ignore[attr-defined]
            return result, [r.json for r in server.requests]

    return asyncio.run(go())


@pytest.mark.parametrize("provider", list(MAKERS))
def test_each_provider_sends_the_settings_in_its_own_terms(provider: str) -> None:
    """An agent's settings reach each wire format under its own names (Anthropic sends no
    seed, Responses neither seed nor stop sequences), and a strict server accepts the request."""

    def build(url: str) -> Agent[Any, Any]:
        return Agent(MAKERS[provider](url), model_settings=SETTINGS)

    result, [body] = _run(build, json_reply(WHOLE[provider](Turn(text="done"))))
    assert result.output == "done"
    assert EXPECTED[provider](body) == SENT[provider]


@pytest.mark.parametrize("provider", list(MAKERS))
def test_tool_choice_and_parallel_calls_on_the_wire(provider: str) -> None:
    """A run's ``tool_choice`` naming a tool and ``parallel_tool_calls=False`` go out in each
    provider's terms on the first request (Gemini has no parallel switch)."""
    settings = ModelSettings(tool_choice="lookup", parallel_tool_calls=False)
    reply = json_reply(WHOLE[provider](Turn(text="done")))
    _, [body] = _run(
        lambda url: Agent(MAKERS[provider](url), tools=[lookup]), reply, model_settings=settings
    )
    if provider == "openai":
        assert body["tool_choice"] == {"type": "function", "function": {"name": "lookup"}}
        assert body["parallel_tool_calls"] is False
    elif provider == "openai-responses":
        assert body["tool_choice"] == {"type": "function", "name": "lookup"}
        assert body["parallel_tool_calls"] is False
    elif provider == "anthropic":
        assert body["tool_choice"] == {
            "type": "tool",
            "name": "lookup",
            "disable_parallel_tool_use": True,
        }
    else:
        config = body["toolConfig"]["functionCallingConfig"]
        assert config["allowedFunctionNames"] == ["lookup"]


def test_a_fallback_chain_passes_the_settings_to_the_next_model() -> None:
    """When the first model of a chain fails, the next one gets the same settings."""
    first, second = ScriptedModel([fail()]), ScriptedModel([text("ok")])
    chain = FallbackModel(first, second)
    agent = Agent(chain, model_settings=SETTINGS, policy=Policy())
    assert agent.run_sync("hi").output == "ok"
    assert [(r.seed, r.top_p) for r in (*first.requests, *second.requests)] == [
        (42, 0.75),
        (42, 0.75),
    ]


# --- prompt caching ---------------------------------------------------------------------------


def _marked(body: Any) -> list[tuple[str, Any]]:
    """Where the body's cache breakpoints are: ``(place, block)`` in wire order."""
    places: list[tuple[str, Any]] = []
    for tool_def in body.get("tools", []):
        if "cache_control" in tool_def:
            places.append(("tool", tool_def["name"]))
    system = body.get("system")
    for block in system if isinstance(system, list) else []:
        if "cache_control" in block:
            places.append(("system", block["text"]))
    for index, message in enumerate(body["messages"]):
        for position, block in enumerate(message["content"]):
            if "cache_control" in block:
                assert block["cache_control"] == EPHEMERAL
                places.append(("message", (index, position)))
    return places


def test_anthropic_marks_tools_system_and_history_and_reports_the_cache() -> None:
    """Every request of an agent loop marks the last tool, the system prompt and the last block
    of the history, and after an answer the block where the previous request ended too; a
    strict server accepts them, and the cache tokens the server reports are the run's usage."""

    def build(url: str) -> Agent[Any, Any]:
        model = AnthropicModel("m", base_url=url, api_key=KEY, timeouts=FAST)
        return Agent(model, tools=[lookup], system_prompt="Be brief.")

    calling = anthropic_json(Turn(calls=[("toolu_1", "lookup", {"q": "fsm"})]))
    calling["usage"].update(cache_creation_input_tokens=1500, cache_read_input_tokens=0)
    answering = anthropic_json(Turn(text="A state machine."))
    answering["usage"].update(cache_creation_input_tokens=40, cache_read_input_tokens=1500)
    result, bodies = _run(build, json_reply(calling), json_reply(answering))
    assert result.output == "A state machine."
    first, second = bodies
    assert _marked(first) == [("tool", "lookup"), ("system", "Be brief."), ("message", (0, 0))]
    # The second request's history ends with the tool result: that block is marked, and the
    # first request's last block, where its cache entry ends.
    assert _marked(second) == [
        ("tool", "lookup"),
        ("system", "Be brief."),
        ("message", (0, 0)),
        ("message", (2, 0)),
    ]
    assert second["messages"][2]["content"][0]["type"] == "tool_result"
    assert (result.usage.cache_write_tokens, result.usage.cache_read_tokens) == (1540, 1500)


LOOKBACK = 20
"""How many block boundaries before a breakpoint Anthropic looks for an earlier cache entry."""


def _blocks(body: Any) -> list[str]:
    """The body's blocks in cache order (tools, system, messages), each as the JSON of what it
    holds and where it sits, without its cache mark: the prefix up to a block is the key of
    the cache entry a breakpoint there writes."""
    unmarked = [
        {k: v for k, v in block.items() if k != "cache_control"}
        for block in [*body.get("tools", []), *body.get("system", [])]
    ]
    flat = [json.dumps(["head", block], sort_keys=True) for block in unmarked]
    for index, message in enumerate(body["messages"]):
        for block in message["content"]:
            kept = {k: v for k, v in block.items() if k != "cache_control"}
            flat.append(json.dumps([index, message["role"], kept], sort_keys=True))
    return flat


def _breakpoints(body: Any) -> list[int]:
    """The positions (in :func:`_blocks` order) of the body's marked blocks."""
    marked = [
        "cache_control" in block
        for block in [*body.get("tools", []), *body.get("system", [])]
        + [b for m in body["messages"] for b in m["content"]]
    ]
    return [i for i, mark in enumerate(marked) if mark]


def _cached_blocks(before: Any, after: Any) -> int:
    """How many leading blocks of ``after`` Anthropic reads from the entries ``before`` wrote:
    each breakpoint of ``after`` finds an entry at its own block or one of the ``LOOKBACK``
    boundaries before it."""
    old = _blocks(before)
    written = {tuple(old[: p + 1]) for p in _breakpoints(before)}
    new = _blocks(after)
    read = 0
    for point in _breakpoints(after):
        for end in range(point, max(point - LOOKBACK, 0) - 1, -1):
            if tuple(new[: end + 1]) in written:
                read = max(read, end + 1)
                break
    return read


def test_after_a_turn_of_twelve_parallel_calls_the_history_is_still_read_from_the_cache() -> None:
    """A turn of 12 parallel calls adds 24 blocks, more than Anthropic looks back from a
    breakpoint: each next request still reads the whole previous request from the cache (a
    breakpoint sits where the previous request ended), with at most four breakpoints."""

    def build(url: str) -> Agent[Any, Any]:
        model = AnthropicModel("m", base_url=url, api_key=KEY, timeouts=FAST)
        return Agent(model, tools=[lookup], system_prompt="Be brief.", policy=Policy(max_steps=5))

    def twelve(turn: int) -> Reply:
        calls = [(f"toolu_{turn}_{n}", "lookup", {"q": f"w{n}"}) for n in range(12)]
        return json_reply(anthropic_json(Turn(calls=calls)))

    answer = json_reply(anthropic_json(Turn(text="All looked up.")))
    result, bodies = _run(build, twelve(1), twelve(2), answer)
    assert result.output == "All looked up."
    assert len(bodies) == 3 and all(len(_breakpoints(b)) <= 4 for b in bodies)
    assert len(_blocks(bodies[1])) - len(_blocks(bodies[0])) == 24
    for before, after in itertools.pairwise(bodies):
        assert _cached_blocks(before, after) == len(_blocks(before))


def test_anthropic_prompt_cache_opt_out_sends_no_breakpoint() -> None:
    """``AnthropicModel(..., prompt_cache=False)`` sends the request without any breakpoint and
    the system prompt as plain text."""

    def build(url: str) -> Agent[Any, Any]:
        model = AnthropicModel("m", base_url=url, api_key=KEY, timeouts=FAST, prompt_cache=False)
        return Agent(model, tools=[lookup], system_prompt="Be brief.")

    _, [body] = _run(build, json_reply(anthropic_json(Turn(text="ok"))))
    assert _marked(body) == []
    assert body["system"] == "Be brief."


def test_the_history_breakpoint_skips_blocks_that_cannot_carry_one() -> None:
    """Thinking blocks and empty text cannot be marked: the last block that can is."""
    thinking = {"type": "thinking", "thinking": "hm", "signature": "s"}
    body: dict[str, Any] = {
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "q"}]},
            {"role": "assistant", "content": [{"type": "text", "text": "a"}, thinking]},
        ]
    }
    mark_cache_breakpoints(body)
    assert body["messages"][1]["content"] == [
        {"type": "text", "text": "a", "cache_control": EPHEMERAL},
        thinking,
    ]
