"""Shared HTTP plumbing for the providers: clients, timeouts, status and transport error mapping.

Providers never retry: the kernel's ``calling → calling`` move is the only retry layer. What the
plumbing does is classify every failure into the :mod:`fsm_agent.errors` tree with ``retryable``
and ``retry_after`` set, and close every response it opens, whatever happens.
"""

from __future__ import annotations

import asyncio
import functools
import json
import re
import ssl
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass

import httpx
from pydantic import SecretStr

from ..errors import (
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
from ._redact import BODY_LIMIT, MESSAGE_LIMIT, clip
from ._retry_after import parse_retry_after

__all__ = [
    "DEFAULT_MAX_RETRY_AFTER",
    "Call",
    "ClientHolder",
    "ErrorInfo",
    "ErrorParser",
    "StreamReply",
    "Timeouts",
    "classify_error",
    "open_stream",
    "post_json",
    "resolve_api_key",
    "transport_error",
]

DEFAULT_MAX_RETRY_AFTER = 120.0
"""Above this many seconds the error carries the delay and is not retryable in-line."""

_OVERFLOW = re.compile(
    r"context[_ ]length|context window|maximum context|prompt is too long|context size"
    r"|exceeds? the maximum number of tokens|too many (input )?tokens|exceed_context",
    re.IGNORECASE,
)


@dataclass(frozen=True, slots=True)
class Timeouts:
    """Finite timeouts, in seconds.

    ``read`` bounds the wait for a non-streaming response; ``stream_idle`` bounds the silence
    between two chunks of a stream (and the wait for its headers), so a stalled stream fails fast
    while a long one that keeps talking is never cut.
    """

    connect: float = 5.0
    read: float = 600.0
    write: float = 60.0
    pool: float = 30.0
    stream_idle: float = 120.0

    def for_request(self) -> httpx.Timeout:
        """The httpx timeout of a non-streaming call."""
        return httpx.Timeout(connect=self.connect, read=self.read, write=self.write, pool=self.pool)

    def for_stream(self) -> httpx.Timeout:
        """The httpx timeout of a streaming call: httpx applies ``read`` to every socket read."""
        return httpx.Timeout(
            connect=self.connect, read=self.stream_idle, write=self.write, pool=self.pool
        )


@functools.cache
def _ssl_context() -> ssl.SSLContext:
    """One TLS context per process, as httpx builds by default: loading the CA bundle (~30 ms) is
    otherwise paid by every fresh client (one per event loop) on its first call."""
    return httpx.create_ssl_context()


class ClientHolder:
    """The ``httpx.AsyncClient`` a provider uses: the caller's (never closed here) or our own.

    Our own client is created lazily, once per event loop, because pooled connections cannot
    cross loops (``run_sync`` starts a fresh loop on every call).
    """

    def __init__(self, client: httpx.AsyncClient | None, timeouts: Timeouts) -> None:
        self._given = client
        self._timeouts = timeouts
        self._own: httpx.AsyncClient | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def get(self) -> httpx.AsyncClient:
        """The client to use in the running event loop."""
        if self._given is not None:
            return self._given
        loop = asyncio.get_running_loop()
        if self._own is None or self._loop is not loop or self._own.is_closed:
            self._own = httpx.AsyncClient(
                timeout=self._timeouts.for_request(),
                verify=_ssl_context(),
                limits=httpx.Limits(max_connections=100, max_keepalive_connections=20),
            )
            self._loop = loop
        return self._own

    async def aclose(self) -> None:
        """Close our own client (a client passed in by the caller is left open)."""
        if self._own is not None and self._loop is asyncio.get_running_loop():
            await self._own.aclose()
        self._own = None
        self._loop = None


def resolve_api_key(
    api_key: str | SecretStr | None, env: Mapping[str, str], *names: str
) -> SecretStr | None:
    """The key given, else the first of the environment variables ``names`` that is set."""
    if isinstance(api_key, SecretStr):
        return api_key
    if api_key:
        return SecretStr(api_key)
    for name in names:
        value = env.get(name)
        if value:
            return SecretStr(value)
    return None


@dataclass(frozen=True, slots=True)
class ErrorInfo:
    """What a provider's error body says: message, error type or status string, the HTTP-like
    code inside the body, a delay from the body, and a provider verdict on retrying."""

    message: str | None = None
    kind: str | None = None
    code: int | None = None
    retry_after: float | None = None
    retryable: bool | None = None


ErrorParser = Callable[[object], ErrorInfo]
"""Turns a decoded error body (any JSON value) into :class:`ErrorInfo`."""

_KIND_CLASS: dict[str, type[ModelError]] = {
    "rate_limit_error": RateLimitError,
    "rate_limit_exceeded": RateLimitError,
    "resource_exhausted": RateLimitError,
    "overloaded_error": ProviderServerError,
    "api_error": ProviderServerError,
    "server_error": ProviderServerError,
    "internal": ProviderServerError,
    "unavailable": ProviderServerError,
    "timeout_error": ModelTimeoutError,
    "deadline_exceeded": ModelTimeoutError,
    "authentication_error": AuthenticationError,
    "permission_error": AuthenticationError,
    "unauthenticated": AuthenticationError,
    "permission_denied": AuthenticationError,
    "invalid_request_error": InvalidRequestError,
    "not_found_error": InvalidRequestError,
    "invalid_argument": InvalidRequestError,
    "not_found": InvalidRequestError,
    "failed_precondition": InvalidRequestError,
    "billing_error": InvalidRequestError,
    "exceed_context_size_error": ContextWindowExceededError,
    "context_length_exceeded": ContextWindowExceededError,
}


_NEVER_RETRY = frozenset({"insufficient_quota", "billing_error"})


def _class_for_status(status: int) -> type[ModelError]:
    """The error class an HTTP status implies on its own."""
    if status in (401, 403):
        return AuthenticationError
    if status == 408:
        return ModelTimeoutError
    if status == 429:
        return RateLimitError
    if status >= 500:
        return ProviderServerError
    if status == 413:
        return ContextWindowExceededError
    if status == 409:
        return ModelError
    return InvalidRequestError


def classify_error(
    *,
    provider: str,
    status: int | None,
    info: ErrorInfo,
    headers: Mapping[str, str] | None = None,
    body: str | None = None,
    max_retry_after: float = DEFAULT_MAX_RETRY_AFTER,
    secret: SecretStr | None = None,
    streamed: bool = True,
) -> ModelError:
    """Build the typed error for a failed call.

    ``status`` is the HTTP status, or ``None`` for an error that arrived inside a 200 answer (then
    the body's ``code`` and ``kind`` decide; ``streamed`` says whether it came in a stream). A
    401 or 403 is always an :class:`AuthenticationError`, whatever type the body names. Precedence
    of the verdict: ``x-should-retry``, then the provider's own (e.g. a daily quota), then the
    status; a delay above ``max_retry_after`` makes the error non-retryable but keeps the delay so
    the caller can schedule it. Texts are redacted before they are cut.
    """
    effective = status if status is not None and status >= 400 else info.code
    kind = (info.kind or "").lower()
    text = clip(info.message or body or "", secret, MESSAGE_LIMIT) or "no error message"
    cls = _error_class(effective, kind, text)
    delay = parse_retry_after(headers) if headers is not None else None
    if delay is None:
        delay = info.retry_after
    retryable = _retryable(cls, kind, info, headers)
    if delay is not None and delay > max_retry_after:
        retryable = False
    if status is not None and status >= 400:
        label = f"HTTP {status}"
    else:
        label = "stream error" if streamed else "error in the response body"
    return cls(
        f"{provider}: {label}: {text}",
        retryable=retryable,
        retry_after=delay,
        status_code=effective,
        body=clip(body, secret, BODY_LIMIT) if body else None,
        provider=provider,
    )


def _error_class(effective: int | None, kind: str, text: str) -> type[ModelError]:
    """The class of an error with status (or body code) ``effective``, of the provider's
    ``kind``, saying ``text``: a status that never depends on the body (5xx, 401, 403, 429),
    then the kind, then the status; an invalid request that names the context window is an
    overflow."""
    cls: type[ModelError]
    if effective is not None and (effective >= 500 or effective in (401, 403, 429)):
        cls = _class_for_status(effective)
    elif kind in _KIND_CLASS:
        cls = _KIND_CLASS[kind]
    elif effective is not None and effective >= 400:
        cls = _class_for_status(effective)
    else:
        cls = ProviderServerError
    if cls is InvalidRequestError and _OVERFLOW.search(f"{kind} {text}"):
        cls = ContextWindowExceededError
    return cls


def _retryable(
    cls: type[ModelError], kind: str, info: ErrorInfo, headers: Mapping[str, str] | None
) -> bool:
    """Whether an error of ``cls`` may be retried: ``x-should-retry`` first, then the
    provider's own verdict, then the class (a kind that never succeeds again is not)."""
    # 409 (conflict) is the one status without a class of its own: retryable, plain ModelError.
    retryable = cls is ModelError or cls.default_retryable
    if kind in _NEVER_RETRY:
        retryable = False
    if info.retryable is not None:
        retryable = info.retryable
    should = (headers or {}).get("x-should-retry")
    if should == "true":
        return True
    if should == "false":
        return False
    return retryable


def _shown_url(url: str) -> str:
    """``url`` without user info or query, fit for an error message."""
    parsed = httpx.URL(url)
    port = f":{parsed.port}" if parsed.port is not None else ""
    return f"{parsed.scheme}://{parsed.host}{port}{parsed.path}"


def _described(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _root_cause(exc: BaseException) -> BaseException:
    """The innermost exception ``exc`` was raised from (for a connection: the OS error)."""
    seen = {id(exc)}
    while (inner := exc.__cause__ or exc.__context__) is not None and id(inner) not in seen:
        seen.add(id(inner))
        exc = inner
    return exc


def transport_error(exc: httpx.TransportError, provider: str, url: str | None = None) -> ModelError:
    """Map an httpx transport failure (connect, read, reset, timeout) to a typed error whose
    message names the URL (without credentials) and the cause."""
    detail = _described(exc)
    root = _root_cause(exc)
    if root is not exc:  # httpx's text is generic; the OS error says what happened
        detail = f"{detail} ({_described(root)})"
    where = f" ({_shown_url(url)})" if url else ""
    if isinstance(exc, httpx.TimeoutException):
        return ModelTimeoutError(f"{provider}: timed out{where}: {detail}", provider=provider)
    if isinstance(exc, httpx.NetworkError | httpx.RemoteProtocolError | httpx.ProxyError):
        return ModelConnectionError(
            f"{provider}: connection failed{where}: {detail}", provider=provider
        )
    return ModelError(f"{provider}: transport failure{where}: {detail}", provider=provider)


def _decode_body(raw: bytes) -> tuple[str, object]:
    text = raw.decode("utf-8", "replace")
    try:
        return text, json.loads(text)
    except (ValueError, RecursionError):  # nested past the parser's depth: not usable JSON
        return text, None


async def _raise_for_status(
    response: httpx.Response,
    provider: str,
    parse_error: ErrorParser,
    max_retry_after: float,
    secret: SecretStr | None,
) -> None:
    if response.status_code < 400:
        return
    text, payload = _decode_body(await response.aread())
    raise classify_error(
        provider=provider,
        status=response.status_code,
        info=parse_error(payload),
        headers=response.headers,
        body=text,
        max_retry_after=max_retry_after,
        secret=secret,
    )


@dataclass(frozen=True, slots=True)
class Call:
    """Everything about one HTTP call that the error mapping needs."""

    client: httpx.AsyncClient
    url: str
    headers: Mapping[str, str]
    provider: str
    parse_error: ErrorParser
    timeouts: Timeouts
    max_retry_after: float
    secret: SecretStr | None
    params: Mapping[str, str] | None = None


async def post_json(call: Call, body: Mapping[str, object]) -> object:
    """POST ``body`` and return the decoded JSON answer; every failure becomes a ModelError."""
    try:
        response = await call.client.post(
            call.url,
            json=body,
            headers=dict(call.headers),
            params=call.params,
            timeout=call.timeouts.for_request(),
        )
    except httpx.TransportError as exc:
        raise transport_error(exc, call.provider, call.url) from None
    await _raise_for_status(
        response, call.provider, call.parse_error, call.max_retry_after, call.secret
    )
    return _json_body(call, response, response.content)


def _json_body(call: Call, response: httpx.Response, raw: bytes) -> object:
    text, payload = _decode_body(raw)
    if payload is None:
        raise MalformedResponseError(
            f"{call.provider}: the response body is not JSON",
            status_code=response.status_code,
            body=clip(text, call.secret, BODY_LIMIT),
            provider=call.provider,
        )
    return payload


_SSE_TYPE = "text/event-stream"


@dataclass(frozen=True, slots=True)
class StreamReply:
    """The answer to a streaming request: an open event stream, or one whole JSON payload.

    Some servers and gateways answer a streaming request with a plain ``application/json``
    completion; it is then read whole into :attr:`payload` and :attr:`response` is drained.
    """

    response: httpx.Response
    payload: object = None
    _chunks: AsyncIterator[bytes] | None = None

    @property
    def is_stream(self) -> bool:
        """``True`` when the body is an event stream to read with :meth:`chunks`."""
        return self.payload is None

    def chunks(self) -> AsyncIterator[bytes]:
        """The raw bytes of the event stream, chunk by chunk (one iterator: a reader that
        stops at the stream's end signal leaves the rest to :func:`open_stream`)."""
        if self._chunks is None:
            return self.response.aiter_bytes()
        return self._chunks

    async def drain(self) -> None:
        """Read what is left after the stream's end signal (normally only the end of the
        body) so the connection goes back to the pool: httpx closes a connection whose
        response is closed unread. A server that keeps sending is cut after
        :data:`_DRAIN_BYTES` bytes or :data:`_DRAIN_SECONDS`, as every stream was before."""
        if self._chunks is None or self.response.is_closed:
            return
        left = _DRAIN_BYTES
        try:
            async with asyncio.timeout(_DRAIN_SECONDS):
                async for chunk in self._chunks:
                    left -= len(chunk)
                    if left < 0:
                        return
        except (TimeoutError, httpx.HTTPError):
            return


_DRAIN_BYTES = 65_536
_DRAIN_SECONDS = 0.25


async def _stream_reply(call: Call, response: httpx.Response) -> StreamReply:
    media = response.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if not media or media == _SSE_TYPE:
        return StreamReply(response, _chunks=response.aiter_bytes())
    raw = await response.aread()
    if media == "application/json" or media.endswith("+json"):
        return StreamReply(response, _json_body(call, response, raw))
    raise MalformedResponseError(
        f"{call.provider}: a streaming request was answered with content type {media!r}, "
        f"neither {_SSE_TYPE} nor application/json",
        retryable=False,
        status_code=response.status_code,
        body=clip(raw.decode("utf-8", "replace"), call.secret, BODY_LIMIT),
        provider=call.provider,
    )


@asynccontextmanager
async def open_stream(call: Call, body: Mapping[str, object]) -> AsyncIterator[StreamReply]:
    """POST ``body`` as a streaming request and yield the answer, read by its content type.

    An error status raises the typed error; a body that is neither an event stream nor JSON
    raises a non-retryable :class:`MalformedResponseError` naming its content type; a transport
    failure while the caller reads the stream is converted too. When the caller is done with a
    stream, what is left of it is drained (:meth:`StreamReply.drain`) so the connection can be
    reused. The response is closed on every way out, cancellation included.
    """
    request = call.client.build_request(
        "POST",
        call.url,
        json=body,
        headers=dict(call.headers),
        params=call.params,
        timeout=call.timeouts.for_stream(),
    )
    try:
        response = await call.client.send(request, stream=True)
    except httpx.TransportError as exc:
        raise transport_error(exc, call.provider, call.url) from None
    try:
        await _raise_for_status(
            response, call.provider, call.parse_error, call.max_retry_after, call.secret
        )
        reply = await _stream_reply(call, response)
        yield reply
        await reply.drain()
    except httpx.TransportError as exc:
        raise transport_error(exc, call.provider, call.url) from None
    finally:
        await response.aclose()
