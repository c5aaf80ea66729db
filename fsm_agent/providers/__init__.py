"""Model providers on httpx: OpenAI Chat Completions (and compatible servers), OpenAI Responses,
Anthropic Messages, and Gemini.

Each provider implements :class:`fsm_agent.models.StreamingModel`, takes an optional
``httpx.AsyncClient``, holds its API key as a secret, never retries on its own (the kernel owns
the only retry layer) and raises the typed errors of :mod:`fsm_agent.errors`, masked of the key.

Read in order: ``_base`` (what the three share: settings, client, call plumbing, the error
boundary), ``_http`` (requests, status and transport error mapping, content-type aware streams),
``_redact`` (the one redaction step), ``_sse`` (the event-stream decoder), ``_assembly`` (wire
JSON to neutral parts), then one module per wire format: ``openai``, ``openai_responses``,
``anthropic``, ``gemini``;
``fallback`` chains models of any kind; ``text_calls`` reads tool calls a model wrote as text.
"""

from __future__ import annotations

from collections.abc import Mapping

import httpx
from pydantic import SecretStr

from ..errors import ConfigurationError
from ._base import ProviderOptions
from ._http import DEFAULT_MAX_RETRY_AFTER, Timeouts
from ._retry_after import parse_retry_after
from ._sse import ServerSentEvent, SSEDecoder
from .anthropic import AnthropicModel
from .fallback import DEFAULT_FALLBACK_ON, FallbackModel
from .gemini import GeminiModel
from .openai import OpenAIChatModel
from .openai_responses import OpenAIResponsesModel
from .text_calls import TextToolCalls

__all__ = [
    "DEFAULT_FALLBACK_ON",
    "DEFAULT_MAX_RETRY_AFTER",
    "AnthropicModel",
    "FallbackModel",
    "GeminiModel",
    "OpenAIChatModel",
    "OpenAIResponsesModel",
    "ProviderModel",
    "SSEDecoder",
    "ServerSentEvent",
    "TextToolCalls",
    "Timeouts",
    "infer_model",
    "parse_retry_after",
]

ProviderModel = OpenAIChatModel | OpenAIResponsesModel | AnthropicModel | GeminiModel
"""Any of the built-in provider models."""

_CLASSES: dict[str, type[ProviderModel]] = {
    "openai": OpenAIChatModel,
    "openai-responses": OpenAIResponsesModel,
    "anthropic": AnthropicModel,
    "gemini": GeminiModel,
}

_PREFIXES = {
    "openai": "openai",
    "openai-responses": "openai-responses",
    "anthropic": "anthropic",
    "claude": "anthropic",
    "gemini": "gemini",
    "google": "gemini",
    "google-gla": "gemini",
}


def infer_model(
    spec: str,
    *,
    api_key: str | SecretStr | None = None,
    base_url: str | None = None,
    client: httpx.AsyncClient | None = None,
    timeouts: Timeouts | None = None,
    context_window: int | None = None,
    env: Mapping[str, str] | None = None,
) -> ProviderModel:
    """Build a provider model from ``"<provider>:<model>"``.

    Providers: ``openai`` (Chat Completions, also any OpenAI-compatible server, with
    ``base_url``), ``openai-responses`` (OpenAI's Responses API), ``anthropic`` (alias
    ``claude``), ``gemini`` (aliases ``google``, ``google-gla``). Keys and base URLs not
    given come from the provider's environment variables.

    >>> infer_model("openai:gpt-4o-mini", api_key="sk-test").name
    'openai:gpt-4o-mini'
    """
    prefix, colon, model = spec.partition(":")
    provider = _PREFIXES.get(prefix.strip().lower())
    if not colon or provider is None or not model.strip():
        known = ", ".join(sorted(_PREFIXES))
        raise ConfigurationError(
            f"cannot infer a model from {spec!r}: use '<provider>:<model>' with one of {known}"
        )
    options: ProviderOptions = {
        "api_key": api_key,
        "base_url": base_url,
        "client": client,
        "timeouts": timeouts,
        "context_window": context_window,
        "env": env,
    }
    return _CLASSES[provider](model.strip(), **options)
