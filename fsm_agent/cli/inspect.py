"""``fsm-agent inspect``: serve the live inspector over a checkpoint store (the ``[inspector]``
extra). Read-only unless ``--agent`` names the agent that resumes the store's runs."""

from __future__ import annotations

import argparse
from typing import Any

from ..errors import CheckpointError, MissingExtraError
from .args import UsageError, existing_store, mask_url, nonempty_text, positive_int

__all__ = ["add_arguments", "handle"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``fsm-agent inspect``."""
    parser.add_argument(
        "store",
        metavar="STORE",
        type=existing_store,
        help="the checkpoint store: a SQLite path, sqlite:///PATH or postgresql://…",
    )
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="the address to listen on (default: %(default)s, this machine only)",
    )
    parser.add_argument(
        "--port", type=positive_int, default=8765, help="the port (default: %(default)s)"
    )
    parser.add_argument(
        "--agent",
        metavar="MODULE:FACTORY",
        help="an Agent, or a function of no arguments returning one, that resumes suspended runs "
        "when you answer them on the page (without it the page is read-only)",
    )
    parser.add_argument(
        "--token",
        type=nonempty_text,
        help="the access token the page needs (default: a fresh random one, printed at start)",
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
    try:
        from ..inspector import serve
    except MissingExtraError as exc:
        raise UsageError(str(exc)) from None
    agent = _agent(args.agent) if args.agent else None
    try:
        serve(
            args.store,
            agent=agent,
            host=args.host,
            port=args.port,
            token=args.token,
            public_read=args.public_read,
        )
    except CheckpointError as exc:
        raise UsageError(mask_url(args.store, f"cannot open {args.store!r}: {exc}")) from None
    except OSError as exc:  # the port is taken, or the address is not this machine's
        raise UsageError(f"cannot listen on {args.host}:{args.port}: {exc.strerror}") from None
    return 0
