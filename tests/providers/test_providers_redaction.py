"""The API key never leaves the provider, whatever error shape carries it back.

A server that echoes the key (in an HTTP error, a 200 carrying an error object, a stream
``error`` event, an undecodable event, a foreign body) places it where a length limit cuts the
text, so a mask applied after the cut would leave most of the key. The sweep checks every sink a
run writes to: the exception (text, args, body), ``RunResult.error``, the events, a recording,
the SQLite and PostgreSQL stores, the log, and what ``fsm-agent runs show`` and ``fsm-agent
replay`` print.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from conftest_network import no_external_network  # noqa: F401
from fsm_agent import Agent, Policy, RetryPolicy, RunHandle
from fsm_agent.errors import ModelError
from fsm_agent.messages import Message, ModelRequest
from fsm_agent.persistence.sqlite import SQLiteCheckpointer
from fsm_agent.providers import AnthropicModel, GeminiModel, OpenAIChatModel
from fsm_agent.providers._redact import BODY_LIMIT, MESSAGE_LIMIT, scrub_error
from fsm_agent.replay import record
from postgres_store import DSN, postgres_checkpointer
from provider_server import (
    FAST,
    ProviderServer,
    Reply,
    Turn,
    anthropic_events,
    json_reply,
    openai_events,
    run,
    sse,
    sse_reply,
)

KEY = "sk-SWEEP-7f3c2a9b1e0d4c6f8a2b5e9d"
WINDOW = 8
"""No run of this many characters of the key may survive anywhere."""


def leaks(text: str) -> bool:
    """Whether ``text`` holds any ``WINDOW`` consecutive characters of the key."""
    return any(KEY[i : i + WINDOW] in text for i in range(len(KEY) - WINDOW + 1))


def straddling(limit: int, lead: str = "") -> str:
    """Text whose copy of the key straddles the ``limit``-th character (after ``lead``)."""
    return "x" * (limit - len(lead) - len(KEY) // 2) + KEY + " trailing words"


MAKERS: dict[str, Callable[[str], Any]] = {
    "openai": lambda url: OpenAIChatModel("m", base_url=url, api_key=KEY, timeouts=FAST),
    "anthropic": lambda url: AnthropicModel("m", base_url=url, api_key=KEY, timeouts=FAST),
    "gemini": lambda url: GeminiModel("m", base_url=url, api_key=KEY, timeouts=FAST),
}


def _error_body(provider: str, message: str) -> dict[str, Any]:
    if provider == "anthropic":
        return {"type": "error", "error": {"type": "api_error", "message": message}}
    if provider == "gemini":
        return {"error": {"code": 500, "status": "INTERNAL", "message": message}}
    return {"error": {"message": message, "type": "server_error", "code": 500}}


def _in_stream(provider: str, message: str) -> Reply:
    if provider == "openai":
        return sse_reply(
            sse(*openai_events(Turn(text="so far"))[:2], _error_body(provider, message))
        )
    if provider == "anthropic":
        events = [*anthropic_events(Turn(text="so far"), stop=False)[:3]]
        events.append(_error_body(provider, message))
        return sse_reply(sse(*events, names=[e["type"] for e in events]))
    return sse_reply(_gemini_bare(message))


def _gemini_bare(message: str) -> list[bytes]:
    """Gemini's error object written without ``data:`` prefixes, over several lines."""
    return [
        b"{\r\n",
        b'  "error": {\r\n',
        b'    "code": 500,\r\n',
        f'    "message": "{message}",\r\n'.encode(),
        b'    "status": "INTERNAL"\r\n',
        b"  }\r\n",
        b"}\r\n",
    ]


# Each error shape: (name, provider -> (reply, streaming)).
SHAPES: dict[str, Callable[[str], tuple[Reply, bool]]] = {
    "http error message": lambda p: (
        json_reply(_error_body(p, straddling(MESSAGE_LIMIT)), 500),
        False,
    ),
    "http error text body": lambda p: (
        Reply(
            status=502,
            headers={"content-type": "text/plain"},
            body=[straddling(BODY_LIMIT).encode()],
        ),
        False,
    ),
    "200 carrying an error": lambda p: (
        json_reply(_error_body(p, straddling(MESSAGE_LIMIT))),
        False,
    ),
    "stream error event": lambda p: (_in_stream(p, straddling(MESSAGE_LIMIT)), True),
    "undecodable stream event": lambda p: (
        sse_reply([f"data: {{{straddling(BODY_LIMIT)}\n\n".encode()]),
        True,
    ),
    "200 body that is not json": lambda p: (
        Reply(headers={"content-type": "application/json"}, body=[straddling(BODY_LIMIT).encode()]),
        False,
    ),
    "foreign content type": lambda p: (
        Reply(headers={"content-type": "text/html"}, body=[straddling(BODY_LIMIT).encode()]),
        True,
    ),
}
providers = pytest.mark.parametrize("provider", list(MAKERS))
shapes = pytest.mark.parametrize("shape", list(SHAPES))


async def _call(model: Any, request: ModelRequest, streaming: bool) -> None:
    if streaming:
        _ = [item async for item in model.stream(request)]
    else:
        await model.complete(request)


@providers
@shapes
def test_the_key_is_masked_in_every_error_shape(provider: str, shape: str) -> None:
    """Every error a provider raises is free of the key: message, args, repr and body."""
    reply, streaming = SHAPES[shape](provider)

    async def scenario() -> ModelError:
        async with ProviderServer().script(reply) as server:
            model = MAKERS[provider](server.url)
            request = ModelRequest(messages=(Message.user("hi"),))
            with pytest.raises(ModelError) as caught:
                await _call(model, request, streaming)
            await model.aclose()
            return caught.value

    error = run(scenario())
    texts = [str(error), repr(error), *map(str, error.args), error.body or ""]
    assert not any(leaks(t) for t in texts), texts
    assert "**********" in " ".join(texts)


@providers
@pytest.mark.parametrize(
    "shape", ["200 carrying an error", "stream error event", "http error message"]
)
def test_the_key_reaches_no_sink_of_a_run(
    provider: str,
    shape: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A run whose model echoes the key keeps it out of the result, the events, a recording,
    the SQLite store, the log, ``fsm-agent runs show`` and ``fsm-agent replay``."""
    caplog.set_level(logging.DEBUG)
    reply, _ = SHAPES[shape](provider)
    store = tmp_path / "runs.db"
    recording = tmp_path / "run.jsonl"

    async def scenario() -> tuple[list[Any], list[Any]]:
        async with ProviderServer(lambda request: reply) as server:
            model = MAKERS[provider](server.url)
            checkpointer = SQLiteCheckpointer(store)
            retry = RetryPolicy(max_retries=1, base_delay_s=0.0, jitter=0.0)
            agent: Agent[None] = Agent(model, checkpointer=checkpointer, policy=Policy(retry=retry))
            recorded = await record(agent, "hi", recording)  # streamed calls
            plain = await agent.run("hi again")  # non-streamed calls
            handle = RunHandle()
            events = [e async for e in agent.run_stream("and again", handle=handle)]
            checkpointer.close()
            await model.aclose()
            return [recorded, plain, handle.result], events

    results, events = run(scenario())
    for result in results:
        assert not result.ok and result.error is not None
        assert not leaks(str(result.error)) and not leaks(repr(result))
    assert not any(leaks(e.model_dump_json()) for e in events)
    assert not leaks(recording.read_text(encoding="utf-8"))
    for path in tmp_path.glob("runs.db*"):
        assert not leaks(path.read_bytes().decode("utf-8", "replace")), path.name
    assert not leaks(caplog.text)
    printed = _cli_output(["replay", str(recording)], capsys)
    for summary in SQLiteCheckpointer(store).runs():
        printed += _cli_output(["runs", "show", summary.run_id, "--db", str(store)], capsys)
    assert printed and not leaks(printed)


def _cli_output(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """What ``fsm-agent ARGV`` prints, both streams."""
    from fsm_agent.cli import main

    main(argv)
    out, err = capsys.readouterr()
    return out + err


@pytest.mark.postgres
@providers
def test_the_key_reaches_no_postgres_table(provider: str) -> None:
    """A run whose model echoes the key in a 200 error object and in a stream error event
    keeps it out of every PostgreSQL table the run writes."""
    shapes = iter(["200 carrying an error", "stream error event"] * 4)

    async def scenario() -> None:
        async with ProviderServer(lambda request: SHAPES[next(shapes)](provider)[0]) as server:
            model = MAKERS[provider](server.url)
            retry = RetryPolicy(max_retries=1, base_delay_s=0.0, jitter=0.0)
            agent: Agent[None] = Agent(model, checkpointer=checkpointer, policy=Policy(retry=retry))
            await agent.run("hi")
            _ = [e async for e in agent.run_stream("and again")]
            await model.aclose()

    with postgres_checkpointer() as checkpointer:
        run(scenario())
        psycopg = pytest.importorskip("psycopg")
        with psycopg.connect(DSN) as conn:
            dumped = " ".join(
                str(row)
                for table in ("runs", "checkpoints", "effects", "outputs")
                for row in conn.execute(f'SELECT * FROM "{checkpointer.schema}".{table}').fetchall()
            )
        assert "**********" in dumped and not leaks(dumped)


def test_scrubbing_masks_before_cutting_and_twice_changes_nothing() -> None:
    """The redaction step masks a key that straddles the body limit before cutting, and a
    second pass leaves the error as the first left it."""
    error = ModelError(f"echoed {KEY}", body=straddling(BODY_LIMIT))
    scrub_error(error, SecretStr(KEY))
    first = (error.args, error.body)
    scrub_error(error, SecretStr(KEY))
    assert (error.args, error.body) == first
    assert error.body is not None and len(error.body) <= BODY_LIMIT
    assert not leaks(error.body) and not leaks(str(error))
