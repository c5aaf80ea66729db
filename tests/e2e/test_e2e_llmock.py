"""End-to-end: the provider conformance suite against llmock, a third-party server that speaks the
OpenAI (Chat Completions and Responses), Anthropic and Gemini APIs.

Opt in with ``pytest -m e2e`` (``pip install -r benchmarks/requirements-e2e.txt`` installs
llmock). The session starts ``llmock serve`` on 127.0.0.1 and every conformance test that llmock can
script runs against it: each turn becomes one scripted ``reply`` behaviour, and the requests the
provider sent are read back from llmock's journal. llmock picks its own call ids and estimates
usage, so the usage claim is left out and ids are checked for presence and round trip only; it
cannot be made to report the ``error`` or ``other`` finish reasons, which are skipped (nor, on the
Responses API, ``content_filter``).
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from test_e2e_openai_server import _free_port, _stop, _wait_ready

from conformance import (
    Backend,
    ConformanceClaims,
    Session,
    anthropic_results,
    anthropic_system,
    gemini_results,
    gemini_system,
    openai_results,
    openai_system,
    responses_results,
    responses_system,
)
from conftest_network import no_external_network  # noqa: F401
from fsm_agent import Agent, Policy, RunHandle, tool
from fsm_agent.errors import (
    AuthenticationError,
    MalformedResponseError,
    ModelConnectionError,
    ModelError,
    ProviderServerError,
    RateLimitError,
)
from fsm_agent.messages import FinishReason, Message, ModelRequest
from fsm_agent.providers import AnthropicModel, GeminiModel, OpenAIChatModel, OpenAIResponsesModel
from provider_server import FAST, Turn, run

pytestmark = pytest.mark.e2e


KEY = "sk-llmock-e2e"
# llmock's neutral finish names, which it writes in each provider's own terms.
FINISHES = {
    FinishReason.STOP: Turn(text="done", finish="stop"),
    FinishReason.TOOL_CALLS: Turn(calls=[("call_x", "lookup", {"q": "x"})]),
    FinishReason.LENGTH: Turn(text="cut", finish="length"),
    FinishReason.CONTENT_FILTER: Turn(text="", finish="content_filter"),
}


@pytest.fixture(scope="session")
def llmock_url(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[str]:
    """The base URL of an llmock server started for the session (and stopped after it)."""
    if importlib.util.find_spec("llmock") is None:
        pytest.skip("llmock is not installed: pip install -r benchmarks/requirements-e2e.txt")
    script = shutil.which("llmock", path=str(Path(sys.executable).parent)) or "llmock"
    port = _free_port()
    log = tmp_path_factory.mktemp("llmock") / "server.log"
    command = [script, "serve", "--host", "127.0.0.1", "--port", str(port)]
    with log.open("wb") as sink:
        proc = subprocess.Popen([*command, "--log-level", "warning"], stdout=sink, stderr=sink)
    try:
        base = f"http://127.0.0.1:{port}"
        _wait_ready(proc, base, log)
        yield base
    finally:
        _stop(proc)


@dataclass
class LlmockSession(Session):
    """A session on llmock, with the URL of its admin API for scripting faults."""

    admin: str = ""


def _behaviour(turn: Turn, last: bool) -> dict[str, Any]:
    reply: dict[str, Any] = {"type": "reply", "times": None if last else 1}
    if turn.text:
        reply["text"] = turn.text
    if turn.calls:
        reply["tool_calls"] = [{"name": n, "arguments": a} for _, n, a in turn.calls]
    if turn.finish:
        reply["finish_reason"] = turn.finish
    return reply


def _llmock_backend(
    url: str,
    name: str,
    model: Any,
    system: Any,
    results: Any,
    *,
    sends_ids: bool = True,
    finishes: dict[FinishReason, Turn] = FINISHES,
) -> Backend:
    @asynccontextmanager
    async def open_session(turns: Sequence[Turn]) -> AsyncIterator[Session]:
        async with httpx.AsyncClient(base_url=url) as admin:
            (await admin.post("/_llmock/reset")).raise_for_status()
            behaviours = [_behaviour(t, i == len(turns) - 1) for i, t in enumerate(turns)]
            scripted = await admin.post("/_llmock/scenario", json={"behaviors": behaviours})
            scripted.raise_for_status()

        def sent() -> list[Any]:
            journal = httpx.get(f"{url}/_llmock/requests").json()["requests"]
            return [r["body"] for r in journal if not r["path"].startswith("/_llmock")]

        provider = model(url)
        try:
            yield LlmockSession(provider, sent, admin=url)
        finally:
            await provider.aclose()

    return Backend(
        name=f"llmock-{name}",
        open=open_session,
        system_prompt_of=system,
        tool_results_of=results,
        finishes=finishes,
        ids_from_server=sends_ids,
        scripted_ids=False,
    )


@pytest.fixture(params=["openai", "openai-responses", "anthropic", "gemini"])
def backend(request: pytest.FixtureRequest, llmock_url: str) -> Backend:
    """Each provider against llmock, through the provider's own path on the server."""
    name: str = request.param
    if name == "openai":
        return _llmock_backend(
            llmock_url,
            name,
            lambda url: OpenAIChatModel(
                "gpt-e2e", base_url=f"{url}/v1", api_key=KEY, timeouts=FAST
            ),
            openai_system,
            openai_results,
        )
    if name == "openai-responses":
        return _llmock_backend(
            llmock_url,
            name,
            lambda url: OpenAIResponsesModel(
                "gpt-e2e", base_url=f"{url}/v1", api_key=KEY, timeouts=FAST
            ),
            responses_system,
            responses_results,
            # llmock writes a content_filter finish as a completed response: the Responses
            # format has no such status, only an incomplete response with that reason.
            finishes={k: v for k, v in FINISHES.items() if k is not FinishReason.CONTENT_FILTER},
        )
    if name == "anthropic":
        return _llmock_backend(
            llmock_url,
            name,
            lambda url: AnthropicModel(
                "claude-e2e", base_url=f"{url}/anthropic", api_key=KEY, timeouts=FAST
            ),
            anthropic_system,
            anthropic_results,
        )
    return _llmock_backend(
        llmock_url,
        name,
        lambda url: GeminiModel(
            "gemini-e2e", base_url=f"{url}/gemini/v1beta", api_key=KEY, timeouts=FAST
        ),
        gemini_system,
        gemini_results,
        sends_ids=False,  # llmock's Gemini function calls carry no id, as the API's often do
    )


class TestLlmockConformance(ConformanceClaims):
    """The conformance claims llmock can be scripted to show, against each provider on llmock."""

    test_usage = None  # llmock estimates usage: it cannot report the scripted token counts


FAULTS: dict[str, tuple[dict[str, Any], type[ModelError], bool]] = {
    "429 with retry-after": (
        {"type": "fail", "status": 429, "retry_after": 2},
        RateLimitError,
        False,
    ),
    "503": ({"type": "fail", "status": 503}, ProviderServerError, False),
    "401": ({"type": "fail", "status": 401}, AuthenticationError, False),
    "stream cut short": (
        {"type": "stream_fault", "kind": "truncate", "after_chunks": 2},
        MalformedResponseError,
        True,
    ),
    "connection dropped": (
        {"type": "stream_fault", "kind": "disconnect", "after_chunks": 2},
        ModelConnectionError,
        True,
    ),
    "corrupt chunk": (
        {"type": "stream_fault", "kind": "malformed", "after_chunks": 2},
        MalformedResponseError,
        True,
    ),
}


@pytest.mark.parametrize("fault", list(FAULTS))
def test_faults_become_typed_errors(backend: Backend, fault: str) -> None:
    """Each fault llmock injects, in each provider's own format, becomes the typed error the
    kernel's retry policy expects (retryable unless it is a refused key)."""
    behaviour, expected, streaming = FAULTS[fault]

    async def scenario() -> ModelError:
        async with backend.open([Turn(text="a long enough answer to cut " * 4)]) as session:
            async with httpx.AsyncClient(base_url=session.admin) as admin:
                queued = await admin.post("/_llmock/scenario", json={"behaviors": [behaviour]})
                queued.raise_for_status()
            with pytest.raises(ModelError) as caught:
                await _call(session.model, streaming)
            return caught.value

    error = run(scenario())
    assert isinstance(error, expected), repr(error)
    assert error.retryable is (expected is not AuthenticationError)
    if fault == "429 with retry-after":
        assert error.retry_after == 2


async def _call(model: Any, streaming: bool) -> None:
    request = ModelRequest(messages=(Message.user("hi"),))
    if streaming:
        _ = [item async for item in model.stream(request)]
    else:
        await model.complete(request)


@pytest.mark.parametrize("streaming", [False, True], ids=["run", "run_stream"])
def test_agent_tool_run_completes(backend: Backend, streaming: bool) -> None:
    """An agent with a tool runs it on llmock's call and ends with llmock's text answer."""
    looked_up: list[str] = []

    @tool
    def lookup(q: str) -> str:
        """Look a word up."""
        looked_up.append(q)
        return "a state machine"

    turns = [Turn(calls=[("call_1", "lookup", {"q": "fsm"})]), Turn(text="It is a state machine.")]

    async def scenario() -> Any:
        async with backend.open(turns) as session:
            agent: Agent[None] = Agent(session.model, tools=[lookup], policy=Policy(max_steps=4))
            handle = RunHandle()
            if streaming:
                _ = [e async for e in agent.run_stream("What is fsm?", handle=handle)]
            else:
                await agent.run("What is fsm?", handle=handle)
            return handle.result

    result = run(scenario())
    assert result.ok, f"the run ended {result.stop_reason}: {result.error}"
    assert result.output == "It is a state machine."
    assert looked_up == ["fsm"]
