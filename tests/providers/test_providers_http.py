"""Transport, status and retry faults (catalogue sections A and C) for every provider, over real
HTTP to the loopback server, plus the Retry-After parser and the API-key secrecy rules."""

from __future__ import annotations

import asyncio
import email.utils
import logging
import socket
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from conftest_network import ExternalNetworkError, no_external_network  # noqa: F401
from fsm_agent.errors import (
    AuthenticationError,
    ContextWindowExceededError,
    InvalidRequestError,
    MalformedResponseError,
    ModelConnectionError,
    ModelError,
    ModelTimeoutError,
    ProviderServerError,
    RateLimitError,
)
from fsm_agent.messages import Message, ModelRequest
from fsm_agent.providers import (
    AnthropicModel,
    GeminiModel,
    OpenAIChatModel,
    OpenAIResponsesModel,
    infer_model,
    parse_retry_after,
)
from fsm_agent.providers._http import ErrorInfo, classify_error
from provider_server import (
    FAST,
    Close,
    ProviderServer,
    Reply,
    Reset,
    Sleep,
    Turn,
    anthropic_events,
    anthropic_sse,
    collect,
    gemini_events,
    gemini_sse,
    json_reply,
    openai_events,
    openai_sse,
    run,
    sse,
    sse_reply,
)
from responses_wire import responses_events, responses_sse

KEY = "sk-SECRET-0123456789abcdef"
REQUEST = ModelRequest(messages=(Message.system("sys"), Message.user("hi")))
TURN = Turn(text="partial answer that never finishes", pieces=4)

Maker = Callable[[str], Any]
MAKERS: dict[str, Maker] = {
    "openai": lambda url: OpenAIChatModel("m", base_url=url, api_key=KEY, timeouts=FAST),
    "openai-responses": lambda url: OpenAIResponsesModel(
        "m", base_url=url, api_key=KEY, timeouts=FAST
    ),
    "anthropic": lambda url: AnthropicModel("m", base_url=url, api_key=KEY, timeouts=FAST),
    "gemini": lambda url: GeminiModel("m", base_url=url, api_key=KEY, timeouts=FAST),
}
# A stream that has started (some deltas) but has not reached its terminal signal.
PARTIAL: dict[str, list[bytes]] = {
    "openai": sse(*openai_events(TURN)[:3]),
    "openai-responses": sse(*responses_events(TURN, stop=False)[:5]),
    "anthropic": sse(*anthropic_events(TURN, stop=False)[:4]),
    "gemini": sse(*gemini_events(TURN)[:-1], eol="\r\n"),
}
providers = pytest.mark.parametrize("provider", list(MAKERS))
paths = pytest.mark.parametrize("streaming", [False, True], ids=["complete", "stream"])


async def call(provider: str, url: str, streaming: bool) -> Any:
    model = MAKERS[provider](url)
    try:
        if streaming:
            return await collect(model, REQUEST)
        return await model.complete(REQUEST)
    finally:
        await model.aclose()


def fail_with(provider: str, replies: list[Reply], streaming: bool) -> ModelError:
    async def scenario() -> ModelError:
        async with ProviderServer().script(*replies) as server:
            with pytest.raises(ModelError) as caught:
                await call(provider, server.url, streaming)
            return caught.value

    return run(scenario())


# --- Retry-After parsing ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"retry-after": "20"}, 20.0),
        ({"retry-after": "1.5"}, 1.5),
        ({"retry-after-ms": "1500", "retry-after": "10"}, 1.5),
        ({"retry-after-ms": "nan", "retry-after": "10"}, 10.0),
        ({"retry-after": "121"}, 121.0),
        ({"retry-after": "inf"}, None),
        ({"retry-after": "nan"}, None),
        ({"retry-after": "-10"}, None),
        ({"retry-after": "0"}, None),
        ({"retry-after": "1e35"}, None),
        ({"retry-after": "Zun, 01 Jan 2026 00:00:00 GMT"}, None),
        ({"retry-after": "Fri, 01 Jan 100000 00:00:00 GMT"}, None),
        ({"retry-after": "garbage"}, None),
        ({}, None),
    ],
)
def test_parse_retry_after_table(headers: dict[str, str], expected: float | None) -> None:
    """ms beats seconds; non-finite, non-positive, huge and malformed values are rejected."""
    assert parse_retry_after(headers) == expected


def test_parse_retry_after_http_dates() -> None:
    """An HTTP-date in the future gives the remaining delay; one in the past is rejected."""
    now = time.time()
    future = email.utils.formatdate(now + 30, usegmt=True)
    past = email.utils.formatdate(now - 30, usegmt=True)
    delay = parse_retry_after({"retry-after": future}, now=now)
    assert delay is not None
    assert 28 <= delay <= 31
    assert parse_retry_after({"retry-after": past}, now=now) is None


# --- status → typed error ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "cls", "retryable"),
    [
        (400, InvalidRequestError, False),
        (401, AuthenticationError, False),
        (403, AuthenticationError, False),
        (404, InvalidRequestError, False),
        (408, ModelTimeoutError, True),
        (409, ModelError, True),
        (413, ContextWindowExceededError, False),
        (422, InvalidRequestError, False),
        (429, RateLimitError, True),
        (500, ProviderServerError, True),
        (502, ProviderServerError, True),
        (503, ProviderServerError, True),
        (504, ProviderServerError, True),
        (529, ProviderServerError, True),
    ],
)
def test_status_maps_to_typed_error(status: int, cls: type[ModelError], retryable: bool) -> None:
    """Each status becomes its error class; 408/409/429/5xx are retryable, the rest not."""
    error = classify_error(provider="p", status=status, info=ErrorInfo(message="m"))
    assert type(error) is cls
    assert (error.retryable, error.status_code) == (retryable, status)


def test_x_should_retry_overrides_status() -> None:
    """``x-should-retry: false`` forbids retrying a 500; ``true`` forces retrying a 400."""
    info = ErrorInfo(message="m")
    no = classify_error(provider="p", status=500, info=info, headers={"x-should-retry": "false"})
    yes = classify_error(provider="p", status=400, info=info, headers={"x-should-retry": "true"})
    assert (no.retryable, yes.retryable) == (False, True)


def test_bad_retry_after_never_masks_the_status_error() -> None:
    """A malformed Retry-After date leaves the 429 a retryable RateLimitError without delay."""
    headers = {"retry-after": "Zun, 99 Foo 2026 25:61:00 GMT"}
    error = classify_error(provider="p", status=429, info=ErrorInfo(), headers=headers)
    assert isinstance(error, RateLimitError)
    assert (error.retryable, error.retry_after) == (True, None)


@providers
@paths
@pytest.mark.parametrize(
    ("headers", "delay"),
    [
        ({"retry-after": "20"}, 20.0),
        ({"retry-after-ms": "1500", "retry-after": "10"}, 1.5),
        ({"retry-after": "inf"}, None),
    ],
)
def test_429_carries_retry_after(
    provider: str, streaming: bool, headers: dict[str, str], delay: float | None
) -> None:
    """A 429 is a retryable RateLimitError carrying the server's delay (each header form)."""
    body = {"error": {"type": "rate_limit_error", "message": "slow down"}}
    error = fail_with(provider, [json_reply(body, 429, **headers)], streaming)
    assert isinstance(error, RateLimitError)
    assert (error.retryable, error.retry_after, error.status_code) == (True, delay, 429)


@providers
def test_delay_above_cap_is_carried_not_retried(provider: str) -> None:
    """A delay above the cap (121 s > 120 s) makes the error non-retryable but keeps the delay."""
    error = fail_with(provider, [json_reply({}, 429, retry_after="121")], False)
    assert isinstance(error, RateLimitError)
    assert (error.retryable, error.retry_after) == (False, 121.0)


@providers
@paths
@pytest.mark.parametrize("status", [500, 502, 503, 504, 529])
def test_server_errors_are_retryable(provider: str, streaming: bool, status: int) -> None:
    """5xx (and Anthropic's 529 overloaded) become a retryable ProviderServerError."""
    error = fail_with(provider, [json_reply({"error": {"message": "boom"}}, status)], streaming)
    assert isinstance(error, ProviderServerError)
    assert error.retryable
    assert error.status_code == status
    assert "boom" in str(error)


@providers
def test_context_overflow_is_typed(provider: str) -> None:
    """A 400 saying the prompt is too long is a ContextWindowExceededError (compact, not retry)."""
    messages = {
        "openai": {"error": {"code": "context_length_exceeded", "message": "too long"}},
        "openai-responses": {
            "error": {
                "type": "invalid_request_error",
                "code": "context_length_exceeded",
                "message": "Your input exceeds the context window of this model.",
            }
        },
        "anthropic": {"error": {"type": "invalid_request_error", "message": "prompt is too long"}},
        "gemini": {
            "error": {
                "code": 400,
                "status": "INVALID_ARGUMENT",
                "message": "The input token count exceeds the maximum number of tokens allowed",
            }
        },
    }
    error = fail_with(provider, [json_reply(messages[provider], 400)], False)
    assert isinstance(error, ContextWindowExceededError)
    assert not error.retryable


@providers
@paths
def test_connection_reset_before_response(provider: str, streaming: bool) -> None:
    """A reset before any byte is a retryable ModelConnectionError."""
    error = fail_with(provider, [Reply(body=[Reset()])], streaming)
    assert isinstance(error, ModelConnectionError)
    assert error.retryable


@providers
def test_connection_reset_mid_stream(provider: str) -> None:
    """A reset after some deltas is a retryable connection error; no response is yielded."""
    error = fail_with(provider, [sse_reply([*PARTIAL[provider], Reset()])], True)
    assert isinstance(error, ModelConnectionError)
    assert error.retryable


@providers
def test_close_mid_chunk_is_a_connection_error(provider: str) -> None:
    """A connection closed inside the chunked body (incomplete read) is retryable."""
    error = fail_with(provider, [sse_reply([*PARTIAL[provider], Close()])], True)
    assert isinstance(error, ModelConnectionError)
    assert error.retryable


@providers
def test_stall_mid_stream_hits_the_idle_timeout(provider: str) -> None:
    """Silence after a few chunks trips the inter-chunk idle timeout (0.5 s here), not 600 s."""
    started = time.monotonic()
    error = fail_with(provider, [sse_reply([*PARTIAL[provider], Sleep(30)])], True)
    assert isinstance(error, ModelTimeoutError)
    assert error.retryable
    assert time.monotonic() - started < 5


@providers
def test_clean_eof_without_terminal_signal_is_truncated(provider: str) -> None:
    """A stream that ends cleanly before its terminal signal is a retryable error, never stop."""
    error = fail_with(provider, [sse_reply(PARTIAL[provider])], True)
    assert isinstance(error, MalformedResponseError)
    assert error.retryable
    assert "truncated" in str(error)


@providers
def test_malformed_sse_json_is_a_typed_error(provider: str) -> None:
    """A ``data:`` payload that is not JSON becomes a retryable MalformedResponseError."""
    bad = [*PARTIAL[provider][:1], b'data: {"error": {"message": unquoted}}\n\n']
    error = fail_with(provider, [sse_reply(bad)], True)
    assert isinstance(error, MalformedResponseError)
    assert error.retryable


@providers
def test_non_json_body_is_a_typed_error(provider: str) -> None:
    """A 200 with a body that is not JSON becomes a MalformedResponseError."""
    error = fail_with(provider, [Reply(body=[b"<html>gateway</html>"])], False)
    assert isinstance(error, MalformedResponseError)


@providers
def test_connect_refused(provider: str) -> None:
    """Nothing listening on the port is a retryable ModelConnectionError."""

    async def scenario() -> ModelError:
        async with ProviderServer() as server:
            url = server.url
        with pytest.raises(ModelError) as caught:
            await call(provider, url, False)
        return caught.value

    error = run(scenario())
    assert isinstance(error, ModelConnectionError)
    assert error.retryable


def test_arbitrary_transport_exception_is_not_disguised() -> None:
    """A bug in a custom transport propagates as itself, never as a retryable ModelError."""

    def handler(request: httpx.Request) -> httpx.Response:
        raise RuntimeError("oops")

    async def scenario() -> None:
        client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
        model = OpenAIChatModel("m", base_url="http://127.0.0.1:9", client=client, api_key=KEY)
        with pytest.raises(RuntimeError, match="oops"):
            await model.complete(REQUEST)
        await client.aclose()

    run(scenario())


@providers
def test_responses_are_closed_on_every_path(provider: str) -> None:
    """After errors, a stall, and a consumer that stops early, no connection is left open."""

    async def scenario() -> None:
        replies = [
            json_reply({"error": {"message": "x"}}, 503),
            sse_reply([*PARTIAL[provider], Sleep(30)]),
            sse_reply([*PARTIAL[provider], Sleep(30)]),
        ]
        async with ProviderServer().script(*replies) as server:
            model = MAKERS[provider](server.url)
            for _ in range(2):
                with pytest.raises(ModelError):
                    await collect(model, REQUEST)
            stream = model.stream(REQUEST)
            async for _ in stream:
                break
            await stream.aclose()
            client = model._clients.get()
            await model.aclose()
            assert client.is_closed
            await asyncio.sleep(0.05)
            assert server.open_connections == 0

    run(scenario())


def test_caller_cancellation_closes_the_response() -> None:
    """Cancelling the consumer mid-stream closes the response and the connection."""

    async def scenario() -> None:
        reply = sse_reply([*PARTIAL["openai"], Sleep(30)])
        async with ProviderServer().script(reply) as server:
            model = MAKERS["openai"](server.url)

            async def consume() -> None:
                async for _ in model.stream(REQUEST):
                    pass

            task = asyncio.create_task(consume())
            await asyncio.sleep(0.2)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            await model.aclose()
            await asyncio.sleep(0.05)
            assert server.open_connections == 0

    run(scenario())


FINISHED = Turn(text="a whole answer", pieces=3)
WHOLE: dict[str, list[bytes]] = {
    "openai": openai_sse(FINISHED),
    "openai-responses": responses_sse(FINISHED),
    "anthropic": anthropic_sse(FINISHED),
    "gemini": gemini_sse(FINISHED),
}


@providers
def test_a_finished_stream_leaves_its_connection_for_the_next_call(provider: str) -> None:
    """A stream read to its end signal gives its connection back to the pool: three streamed
    calls share one connection (a fresh one per call costs a TCP and a TLS handshake)."""

    async def scenario() -> None:
        replies = [sse_reply(WHOLE[provider]) for _ in range(3)]
        async with ProviderServer().script(*replies) as server:
            model = MAKERS[provider](server.url)
            for _ in range(3):
                _, response = await collect(model, REQUEST)
                assert response.message.text == FINISHED.text
            await model.aclose()
            assert server.connections == 1

    run(scenario())


def test_a_server_that_keeps_the_stream_open_after_its_end_costs_a_moment_only() -> None:
    """After ``[DONE]`` the rest of the body is read to keep the connection, but a server that
    never ends the body is cut within a quarter of a second, and the answer stands."""

    async def scenario() -> None:
        reply = sse_reply([*WHOLE["openai"], Sleep(30)])
        async with ProviderServer().script(reply) as server:
            model = MAKERS["openai"](server.url)
            started = time.perf_counter()
            _, response = await collect(model, REQUEST)
            assert time.perf_counter() - started < 5
            assert response.message.text == FINISHED.text
            await model.aclose()
            await asyncio.sleep(0.05)
            assert server.open_connections == 0

    run(scenario())


# --- secrets ----------------------------------------------------------------------------------


@providers
def test_api_key_never_leaks(provider: str, caplog: pytest.LogCaptureFixture) -> None:
    """The key is sent, but is in no repr, log line, error message or error body."""
    caplog.set_level(logging.DEBUG)
    echo = {"error": {"message": f"Incorrect API key provided: {KEY}", "type": "invalid"}}
    error = fail_with(provider, [json_reply(echo, 401)], False)
    assert isinstance(error, AuthenticationError)
    assert not error.retryable
    model = MAKERS[provider]("http://127.0.0.1:1")
    for text in (repr(model), str(model), str(error), repr(error), error.body or "", caplog.text):
        assert KEY not in text
    assert vars(model).get("_api_key") is not None
    assert KEY not in repr(vars(model))


def test_api_key_is_sent_and_read_from_the_environment() -> None:
    """Keys come from the environment variables and travel in each provider's auth header."""

    async def scenario() -> list[dict[str, str]]:
        async with ProviderServer(lambda r: json_reply({"error": {}}, 400)) as server:
            env = {"OPENAI_API_KEY": "k1", "ANTHROPIC_API_KEY": "k2", "GOOGLE_API_KEY": "k3"}
            for spec in ("openai:m", "anthropic:m", "gemini:m"):
                model = infer_model(spec, base_url=server.url, env=env)
                with pytest.raises(InvalidRequestError):
                    await model.complete(REQUEST)
                await model.aclose()
            return [r.headers for r in server.requests]

    openai, anthropic, gemini = run(scenario())
    assert openai["authorization"] == "Bearer k1"
    assert anthropic["x-api-key"] == "k2"
    assert gemini["x-goog-api-key"] == "k3"


def test_network_switch_blocks_non_loopback_hosts() -> None:
    """The conftest switch turns any non-loopback request into a connection failure."""

    async def scenario() -> ModelError:
        model = OpenAIChatModel("m", api_key=KEY, timeouts=FAST)
        with pytest.raises(ModelError) as caught:
            await model.complete(REQUEST)
        await model.aclose()
        return caught.value

    error = run(scenario())
    assert isinstance(error, ModelConnectionError)
    with pytest.raises(ExternalNetworkError):
        socket.getaddrinfo("example.com", 443)


def test_infer_model_rejects_unknown_specs() -> None:
    """An unknown provider prefix or a missing model name is a configuration error."""
    from fsm_agent.errors import ConfigurationError

    for spec in ("gpt-4o", "nope:model", "openai:"):
        with pytest.raises(ConfigurationError):
            infer_model(spec)
    assert infer_model("google:gemini-2.0-flash", api_key="k").name == "gemini:gemini-2.0-flash"
    assert infer_model("claude:c", api_key="k").name == "anthropic:c"


def test_read_timeout_on_a_non_streaming_call() -> None:
    """A non-streaming answer slower than the read timeout is a retryable ModelTimeoutError."""
    from fsm_agent.providers import Timeouts

    async def scenario() -> ModelError:
        slow = Reply(body=[Sleep(5), b"{}"], chunked=True)
        async with ProviderServer().script(slow) as server:
            timeouts = Timeouts(connect=1, read=0.3, write=1, pool=1, stream_idle=0.3)
            model = OpenAIChatModel("m", base_url=server.url, api_key=KEY, timeouts=timeouts)
            with pytest.raises(ModelError) as caught:
                await model.complete(REQUEST)
            await model.aclose()
            return caught.value

    error = run(scenario())
    assert isinstance(error, ModelTimeoutError)
    assert error.retryable


def test_twenty_megabyte_event_over_http() -> None:
    """A single 20 MB SSE event streamed over HTTP arrives whole in the response."""
    big = "y" * (20 * 1024 * 1024)
    events = openai_events(Turn(text="a"))
    events[1]["choices"][0]["delta"]["content"] = big
    pieces = sse(*events, "[DONE]")
    raw = b"".join(pieces)
    size = 1 << 20
    chunked = [raw[i : i + size] for i in range(0, len(raw), size)]

    async def scenario() -> Any:
        async with ProviderServer().script(sse_reply(chunked)) as server:
            model = MAKERS["openai"](server.url)
            try:
                return await collect(model, REQUEST)
            finally:
                await model.aclose()

    _, response = run(scenario())
    assert response.message.text == big
