"""The providers' redaction step: every error text and body a provider produces passes through
here before it is cut to size, stored, logged or emitted. It is the library's one redaction
(:func:`fsm_agent.redaction.redact`: the provider's own key, secrets from the environment, and
text shaped like a credential), with the providers' mask.

Masking before cutting matters: a key cut in half by a length limit no longer matches the
secret, and all but its last characters would survive a mask applied afterwards.
"""

from __future__ import annotations

from pydantic import SecretStr

from .. import redaction
from ..errors import ModelError

__all__ = ["BODY_LIMIT", "MASK", "MESSAGE_LIMIT", "clip", "redact", "scrub_error"]

MASK = "**********"
"""What a secret is replaced with."""

MESSAGE_LIMIT = 500
"""The longest error text quoted from a server in an error message."""

BODY_LIMIT = 65_536
"""The longest response body kept on an error."""


def redact(text: str, secret: SecretStr | None) -> str:
    """``text`` with the secret's value, and anything else that looks like a credential, masked."""
    known = redaction.secret_values()
    if secret is not None:
        known.insert(0, secret.get_secret_value())
    return redaction.redact(text, known, mask=MASK)


def clip(text: str, secret: SecretStr | None, limit: int) -> str:
    """``text`` redacted, then cut to ``limit`` characters (in that order)."""
    return redact(text, secret)[:limit]


def scrub_error(exc: ModelError, secret: SecretStr | None) -> ModelError:
    """Redact and cut ``exc`` in place (its message, args and body) and return it.

    Called at the boundary of every provider call, so an error built anywhere inside a provider
    (a status, a 200 body carrying an error, a stream ``error`` event, an undecodable event)
    leaves it masked. Applying it twice changes nothing.
    """
    exc.args = tuple(redact(a, secret) if isinstance(a, str) else a for a in exc.args)
    if exc.body is not None:
        exc.body = clip(exc.body, secret, BODY_LIMIT)
    return exc
