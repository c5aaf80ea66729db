"""What the three providers share: settings, the client, the call plumbing and the error boundary.

A provider subclasses :class:`ProviderBase`, names its wire details in class attributes (the
environment variables of its key, its endpoint, its auth header, its error body parser) and
implements the wire mapping: ``_complete`` and ``_stream``. The public ``complete`` and
``stream`` wrap them in the error boundary, where every :class:`~fsm_agent.errors.ModelError`
passes through the one redaction step (:func:`~fsm_agent.providers._redact.scrub_error`) on its
way out, whatever built it.
"""

from __future__ import annotations

import os
import urllib.parse
from abc import ABC, abstractmethod
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping, Sequence
from contextlib import aclosing
from typing import ClassVar, Self, TypedDict, Unpack

import httpx
from pydantic import SecretStr

from ..errors import ConfigurationError, ModelError
from ..values.messages import (
    ModelRequest,
    ModelResponse,
    Part,
    ReasoningDelta,
    ReasoningPart,
    StreamDelta,
    TextDelta,
    TextPart,
    ToolCall,
    ToolCallDelta,
)
from ._assembly import JSONObject, as_obj, decode_json
from ._http import (
    DEFAULT_MAX_RETRY_AFTER,
    Call,
    ClientHolder,
    ErrorInfo,
    StreamReply,
    Timeouts,
    classify_error,
    post_json,
    resolve_api_key,
)
from ._redact import scrub_error
from ._sse import SSEDecoder

__all__ = ["ProviderBase", "ProviderOptions", "checked_base_url", "deltas_of"]


def checked_base_url(url: str, source: str) -> str:
    """``url`` when it is an ``http://`` or ``https://`` URL with a host, else a
    :class:`ConfigurationError` that shows it (its user part hidden) with its ``source``:
    checked when the model is built, so a typo fails before a run starts."""
    try:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme in ("http", "https") and parts.hostname:
            return url
    except ValueError:  # an unbalanced IPv6 bracket
        pass
    shown = "***@" + url.rpartition("@")[2] if "@" in url else url
    raise ConfigurationError(
        f"base URL {shown!r}{source} is not an http:// or https:// URL with a host "
        "(e.g. http://127.0.0.1:8000/v1)"
    )


class ProviderOptions(TypedDict, total=False):
    """The settings every provider takes, by keyword."""

    api_key: str | SecretStr | None
    """The API key; when absent, read from the provider's environment variables."""
    base_url: str | None
    """The endpoint; when absent, the provider's environment variable or its public endpoint."""
    client: httpx.AsyncClient | None
    """An ``httpx.AsyncClient`` to share; it is never closed by the provider."""
    timeouts: Timeouts | None
    """Connect, read, write, pool and stream-idle timeouts."""
    context_window: int | None
    """The model's context window in tokens, when known."""
    max_retry_after: float
    """Above this many seconds of ``Retry-After`` an error is not retryable in-line."""
    extra_headers: Mapping[str, str] | None
    """Headers added to every request."""
    env: Mapping[str, str] | None
    """Where keys and base URLs are looked up (default: ``os.environ``)."""


class ProviderBase(ABC):
    """The shared half of a provider model; see the module docstring."""

    provider: ClassVar[str]
    """The provider's name, the prefix of :attr:`name` and of every error message."""
    _key_env: ClassVar[Sequence[str]]
    _url_env: ClassVar[str | None] = None
    _default_url: ClassVar[str]
    _auth_header: ClassVar[str]
    _auth_scheme: ClassVar[str] = ""
    _fixed_headers: ClassVar[Mapping[str, str]] = {}

    @staticmethod
    @abstractmethod
    def _parse_error(payload: object) -> ErrorInfo:
        """What the provider's error body says."""

    def __init__(self, model: str, **options: Unpack[ProviderOptions]) -> None:
        given = options
        env = given.get("env")
        environ = os.environ if env is None else env
        if not model:
            raise ConfigurationError(f"{type(self).__name__} needs a model name")
        self._model = model
        self._api_key = resolve_api_key(given.get("api_key"), environ, *self._key_env)
        given_url = given.get("base_url")
        from_env = environ.get(self._url_env) if self._url_env else None
        if given_url:
            url = checked_base_url(given_url, "")
        elif from_env:
            url = checked_base_url(from_env, f" (from {self._url_env})")
        else:
            url = self._default_url
        self._base_url = url.rstrip("/")
        self._timeouts = given.get("timeouts") or Timeouts()
        self._clients = ClientHolder(given.get("client"), self._timeouts)
        self._context_window = given.get("context_window")
        self._max_retry_after = given.get("max_retry_after", DEFAULT_MAX_RETRY_AFTER)
        self._extra_headers = dict(given.get("extra_headers") or {})

    @property
    def name(self) -> str:
        """``"<provider>:<model>"``."""
        return f"{self.provider}:{self._model}"

    @property
    def model_id(self) -> str:
        """The model as the requests name it (``gpt-4o``), without the provider prefix."""
        return self._model

    @property
    def base_url(self) -> str:
        """The endpoint the requests go to (without a trailing slash)."""
        return self._base_url

    @property
    def context_window(self) -> int | None:
        """The context window given at construction, or ``None``."""
        return self._context_window

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model={self._model!r}, base_url={self._base_url!r})"

    async def aclose(self) -> None:
        """Close the HTTP client this model created (a client passed in stays open)."""
        await self._clients.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def _call(self, path: str, params: Mapping[str, str] | None = None) -> Call:
        """One call to ``<base_url><path>`` with the provider's headers and error parser."""
        headers = {"content-type": "application/json", **self._fixed_headers}
        headers.update(self._extra_headers)
        if self._api_key is not None:
            headers[self._auth_header] = self._auth_scheme + self._api_key.get_secret_value()
        return Call(
            client=self._clients.get(),
            url=f"{self._base_url}{path}",
            headers=headers,
            provider=self.provider,
            parse_error=type(self)._parse_error,
            timeouts=self._timeouts,
            max_retry_after=self._max_retry_after,
            secret=self._api_key,
            params=params,
        )

    def _raise_if_error(self, payload: JSONObject, *, body: str | None, streamed: bool) -> None:
        """Raise the typed error when a 200 answer (whole or one stream event) carries one."""
        if payload.get("error"):
            raise classify_error(
                provider=self.provider,
                status=None,
                info=type(self)._parse_error(payload),
                body=body,
                max_retry_after=self._max_retry_after,
                secret=self._api_key,
                streamed=streamed,
            )

    async def _post(self, call: Call, body: Mapping[str, object]) -> JSONObject:
        """POST a non-streaming request; a 200 that carries an error object raises it."""
        payload = as_obj(await post_json(call, body))
        self._raise_if_error(payload, body=None, streamed=False)
        return payload

    def _whole(
        self, reply: StreamReply, parse: Callable[[JSONObject], ModelResponse]
    ) -> list[StreamDelta | ModelResponse]:
        """A JSON answer to a streaming request, read as one response: its deltas, then it."""
        payload = as_obj(reply.payload)
        self._raise_if_error(payload, body=None, streamed=False)
        response = parse(payload)
        return [*deltas_of(response.message.parts), response]

    async def _payloads(
        self,
        reply: StreamReply,
        decoder: SSEDecoder,
        *,
        sentinel: str | None = None,
        until: Callable[[], bool] = lambda: False,
    ) -> AsyncGenerator[JSONObject]:
        """The decoded JSON of each event of a stream; an event carrying an error raises it.

        Stops at an event whose data is ``sentinel``, or as soon as ``until()`` holds after an
        event was handled.
        """
        async for chunk in reply.chunks():
            for event in decoder.feed(chunk):
                if event.data == sentinel:
                    return
                payload = as_obj(decode_json(event.data, self.provider))
                self._raise_if_error(payload, body=event.data, streamed=True)
                yield payload
                if until():
                    return

    @abstractmethod
    async def _complete(self, request: ModelRequest) -> ModelResponse:
        """The provider's non-streaming call, inside the error boundary."""

    @abstractmethod
    def _stream(self, request: ModelRequest) -> AsyncGenerator[StreamDelta | ModelResponse]:
        """The provider's streaming call, inside the error boundary."""

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """One non-streaming call."""
        try:
            return await self._complete(request)
        except ModelError as exc:
            scrub_error(exc, self._api_key)
            raise

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamDelta | ModelResponse]:
        """Stream one call: deltas as they arrive, then the final response.

        The response is yielded only once the provider's end-of-answer signal arrived; a stream
        that ends before raises a retryable :class:`~fsm_agent.errors.MalformedResponseError`.
        A server that answers with one JSON completion instead of a stream is read as one.
        """
        try:
            async with aclosing(self._stream(request)) as items:
                async for item in items:
                    yield item
        except ModelError as exc:
            scrub_error(exc, self._api_key)
            raise


def deltas_of(parts: Sequence[Part], first_call: int = 0) -> list[StreamDelta]:
    """The deltas a stream would have carried for ``parts``, for a server that sent them whole
    (tool calls numbered from ``first_call``)."""
    deltas: list[StreamDelta] = []
    index = first_call
    for part in parts:
        if isinstance(part, TextPart) and part.text:
            deltas.append(TextDelta(text=part.text))
        elif isinstance(part, ReasoningPart) and part.text:
            deltas.append(ReasoningDelta(text=part.text))
        elif isinstance(part, ToolCall):
            deltas.append(
                ToolCallDelta(
                    index=index, id=part.id, name=part.name, arguments_fragment=part.arguments_json
                )
            )
            index += 1
    return deltas
