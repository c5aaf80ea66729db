"""The one redaction: every text the library shows or keeps that could quote a credential
(a provider's error, the inspector's page, ``fsm-agent runs show``) passes through
:func:`redact`.

Two nets: the values of this process's environment variables whose names say they are secrets
(``*_API_KEY``, ``*_TOKEN``, ``*PASSWORD*``, …) plus any value a caller knows, and text shaped
like a credential: keys (``sk-…``, ``sk_live_…``, ``ghp_…``, ``xoxb-…``, ``AKIA…``, ``AIza…``),
an authorization header's value, a key header or field (``x-api-key: …``, ``"api_key": "…"``),
the value of a quoted pair whose name says it is a secret (``"password": "…"``,
``'token': '…'``) and the password in a URL. Data with names (a tool call's arguments) goes
through :func:`redact_data`, which masks the whole value of a key named like a secret
(:func:`secret_name`), whatever it holds.
"""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Iterable
from typing import Any

__all__ = ["REDACTED", "redact", "redact_data", "secret_name", "secret_values"]

REDACTED = "[redacted]"
"""What stands in for a secret."""

_SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.IGNORECASE)
_KEY_CHARS = r"[A-Za-z0-9_\-]"
_SHAPES = re.compile(
    "|".join(
        (
            # OpenAI- and Anthropic-style keys: long, or short with a digit (not "sk-learn")
            rf"\bsk-(?:{_KEY_CHARS}{{20,}}|(?=[A-Za-z_\-]*\d){_KEY_CHARS}{{4,}})",
            r"\b[spr]k_(?:live|test)_[A-Za-z0-9]{4,}",  # Stripe
            r"\bgh[pousr]_[A-Za-z0-9]{16,}|\bgithub_pat_[A-Za-z0-9_]{20,}",  # GitHub
            r"\bxox[abposre]-[A-Za-z0-9\-]{8,}",  # Slack
            r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b",  # AWS access key ids
            r"\bAIza[0-9A-Za-z_\-]{20,}",  # Google API keys
            r"(?i:\b(?:Bearer|Basic)\s+[A-Za-z0-9._~+/=\-]{8,})",  # authorization values
            r"(?<=://)[^/@\s:]+:[^/@\s]+(?=@)",  # user:password in a URL
        )
    )
)
# A header or a field named like a key, its value in group 2: `x-api-key: v`, `"api_key": "v"`.
_NAMED = re.compile(
    r"(?i)(\b(?:x-)?(?:goog-)?api[-_]?key|\b(?:access|refresh|auth|api|id|x-auth)[-_]token"
    r"|\bclient[-_]secret|\bsecret[-_]key|\bpassword|\bpasswd)"
    r"""(["']?\s*[:=]\s*["']?)([^\s"',;&}]{4,})"""
)

# A quoted name (group 2) and its colon; the quotes may be escaped, as in JSON inside a string.
_PAIR_NAME = re.compile(r"""(\\?["'])([^"'\\\n]{1,64})\1\s*:\s*""")
# The value after it: a quoted string (its text in group 1, 2 or 3) or a number.
_PAIR_VALUE = re.compile(
    r"""\\"(.*?)\\"|"((?:[^"\\\n]|\\.)*)"|'((?:[^'\\\n]|\\.)*)'|-?\d[\d.eE+\-]*"""
)
# A name's words: `api_key`, `x-api-key`, `apiKey` and `APIKey` are each "api", "key".
_WORDS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")
_SECRET_WORDS = frozenset(
    {
        "apikey",
        "authorization",
        "auth",
        "cookie",
        "credential",
        "credentials",
        "passphrase",
        "passwd",
        "password",
        "pwd",
        "secret",
        "token",
    }
)
_KEY_KINDS = frozenset({"access", "api", "encryption", "master", "private", "secret", "signing"})


def secret_name(name: str) -> bool:
    """Whether a field or argument called ``name`` holds a secret: one of its words is a
    secret's (``password``, ``token``, ``secret``, ``credential``, ``auth``, …) or it names a
    kind of key (``api_key``, ``privateKey``, ``x-api-key``). ``max_tokens`` or ``key`` alone do
    not."""
    words = [w.lower() for w in _WORDS.findall(name)]
    if any(w in _SECRET_WORDS for w in words):
        return True
    return any(w == "key" and before in _KEY_KINDS for before, w in itertools.pairwise(words))


def _mask_pairs(text: str, mask: str) -> str:
    """``text`` with the value of each quoted pair whose name is a secret's masked."""
    kept: list[str] = []
    done = 0
    for name in _PAIR_NAME.finditer(text):
        if name.start() < done or not secret_name(name[2]):
            continue
        value = _PAIR_VALUE.match(text, name.end())
        if value is None:
            continue
        inner = next((g for g in range(1, 4) if value[g] is not None), 0)
        kept.append(text[done : value.start(inner)] if inner else text[done : name.end()])
        kept.append(mask)
        done = value.end(inner) if inner else value.end()
    kept.append(text[done:])
    return "".join(kept)


def secret_values() -> list[str]:
    """Values (8 characters or more) of this process's environment variables whose names say
    they are secrets, longest first."""
    return sorted(
        (v for k, v in os.environ.items() if _SECRET_NAME.search(k) and len(v) >= 8),
        key=len,
        reverse=True,
    )


def redact(text: str, secrets: Iterable[str] | None = None, *, mask: str = REDACTED) -> str:
    """``text`` with credentials replaced by ``mask``: every value in ``secrets`` (default:
    :func:`secret_values`) and text shaped like a credential (see the module)."""
    for secret in secret_values() if secrets is None else secrets:
        if secret:
            text = text.replace(secret, mask)
    text = _NAMED.sub(lambda m: f"{m[1]}{m[2]}{mask}", text)
    text = _mask_pairs(text, mask)
    return _SHAPES.sub(mask, text)


def redact_data(value: Any, secrets: Iterable[str] | None = None, *, mask: str = REDACTED) -> Any:
    """``value`` (JSON-ready data) with every string redacted and the whole value of every key
    named like a secret (:func:`secret_name`) replaced by ``mask``, unless it is ``None`` or a
    bool (which hold nothing to hide)."""
    known = list(secret_values() if secrets is None else secrets)
    return _clean(value, known, mask)


def _clean(value: Any, secrets: list[str], mask: str) -> Any:
    if isinstance(value, str):
        return redact(value, secrets, mask=mask)
    if isinstance(value, dict):
        cleaned = {}
        for key, item in value.items():
            hidden = secret_name(str(key)) and item is not None and not isinstance(item, bool)
            cleaned[redact(str(key), secrets, mask=mask)] = (
                mask if hidden else _clean(item, secrets, mask)
            )
        return cleaned
    if isinstance(value, list | tuple):
        return [_clean(v, secrets, mask) for v in value]
    return value
