"""The one redaction: every text the library shows or keeps that could quote a credential
(a provider's error, the inspector's page, ``fsm-agent runs show``) passes through
:func:`redact`.

Two nets: the values of this process's environment variables whose names say they are secrets
(``*_API_KEY``, ``*_TOKEN``, ``*PASSWORD*``, …) plus any value a caller knows, and text shaped
like a credential: keys (``sk-…``, ``sk_live_…``, ``ghp_…``, ``xoxb-…``, ``AKIA…``, ``AIza…``),
an authorization header's value, a key header or field (``x-api-key: …``, ``"api_key": "…"``)
and the password in a URL.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable

__all__ = ["REDACTED", "redact", "secret_values"]

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
    return _SHAPES.sub(mask, text)
