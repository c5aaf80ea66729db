"""``fsm-agent inspect``: serve the live inspector over a checkpoint store (the ``[inspector]``
extra). Read-only unless ``--agent`` names the agent that resumes the store's runs.

The store is ``--store PATH_OR_DSN`` (or, as before, the positional ``STORE``) or comes from the
environment (:data:`STORE_ENV`), so that a database password never appears in the process list.
A start-up failure is one line and exit code 2; a missing extra is exit code 1, as for every
command."""

from __future__ import annotations

import argparse
import ipaddress
import sys
from typing import Any

from ..errors import CheckpointError
from .args import STORE_ENV, UsageError, add_store_option, existing_store, mask_url, the_store

__all__ = ["MIN_TOKEN_LENGTH", "STORE_ENV", "access_token", "add_arguments", "handle", "port"]

MIN_TOKEN_LENGTH = 16
"""The shortest ``--token`` accepted."""


def access_token(text: str) -> str:
    """An access token of at least :data:`MIN_TOKEN_LENGTH` characters, none of them spaces."""
    if len(text) < MIN_TOKEN_LENGTH or any(c.isspace() for c in text):
        raise argparse.ArgumentTypeError(
            f"must be at least {MIN_TOKEN_LENGTH} characters without spaces (got "
            f"{len(text)}); generate one with: python -c 'import secrets; "
            "print(secrets.token_urlsafe(24))', or leave --token out for a fresh one"
        )
    return text


def port(text: str) -> int:
    """A TCP port: a whole number from 0 (a free one, picked at start) to 65535."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number, not {text!r}") from None
    if not 0 <= value <= 65_535:
        raise argparse.ArgumentTypeError(f"must be a port from 0 to 65535, not {value}")
    return value


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: it may resolve to anything
        return False


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``fsm-agent inspect``."""
    add_store_option(parser)
    parser.add_argument(
        "positional_store",
        metavar="STORE",
        nargs="?",
        type=existing_store,
        help="the same as --store, the older spelling",
    )
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="the address to listen on (default: %(default)s, this machine only)",
    )
    parser.add_argument(
        "--port", type=port, default=8765, help="the port, 0 for a free one (default: %(default)s)"
    )
    parser.add_argument(
        "--agent",
        metavar="MODULE:FACTORY",
        help="an Agent, or a function of no arguments returning one, that resumes suspended runs "
        "when you answer them on the page (without it the page is read-only)",
    )
    parser.add_argument(
        "--token",
        type=access_token,
        help=f"the access token the page needs, at least {MIN_TOKEN_LENGTH} characters "
        "(default: a fresh random one, printed at start)",
    )
    parser.add_argument(
        "--public-read",
        action="store_true",
        help="anyone who reaches the address may read the runs without the token (answering a "
        "suspended run still needs it)",
    )


def _agent(target: str) -> Any:
    from ..kernel.agent import Agent
    from .fuzz import load_factory

    try:
        found = load_factory(target)
    except ValueError as exc:
        raise UsageError(f"--agent: {exc}") from None
    if isinstance(found, Agent):
        return found
    try:
        made = found()
    except Exception as exc:
        raise UsageError(f"--agent: {target}() failed: {type(exc).__name__}: {exc}") from None
    if not isinstance(made, Agent):
        raise UsageError(f"--agent: {target}() returned {type(made).__name__}, not an Agent")
    return made


def handle(args: argparse.Namespace) -> int:
    """Serve the inspector until interrupted."""
    from ..inspector import serve  # without the extra: MissingExtraError, exit code 1
    from ..inspector.server import printer

    if args.store is not None and args.positional_store is not None:
        raise UsageError("give the store once: --store PATH_OR_DSN (or the older STORE), not both")
    store = the_store(args.store or args.positional_store)
    agent = _agent(args.agent) if args.agent else None
    show = printer(sys.stderr)

    def announce(url: str) -> None:  # once it listens: a failure to is one line, no warning
        if not _loopback(args.host):
            print(
                f"fsm-agent inspect: warning: serving on {args.host} over plain HTTP: the token "
                "and the runs cross the network unencrypted; put a TLS proxy or an SSH tunnel "
                "in front",
                file=sys.stderr,
            )
        show(url)

    try:
        serve(
            store,
            agent=agent,
            host=args.host,
            port=args.port,
            token=args.token,
            public_read=args.public_read,
            announce=announce,
        )
    except CheckpointError as exc:
        raise UsageError(mask_url(store, f"cannot open {store!r}: {exc}")) from None
    except OSError as exc:  # the port is taken, or the address is not this machine's
        why = (exc.strerror or str(exc)).split(" (while attempting")[0]  # asyncio's addition
        raise UsageError(f"cannot listen on {args.host}:{args.port}: {why}") from None
    return 0
