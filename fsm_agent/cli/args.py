"""What every command shares about its input: the usage error, the one policy reader and the
argument types.

An argument type is given to ``argparse`` as ``type=``; when the text is not acceptable it raises
:class:`argparse.ArgumentTypeError` with a sentence a user can act on, so the parser's one-line
error never shows a function's name. A handler that finds bad input later (a file that cannot be
read, options that do not go together) raises :class:`UsageError`. Either way the command line
prints one line on stderr and exits with code 2.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import math
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ConfigurationError, FsmAgentError

# What a command needs to read its input is imported when it reads it: ``--help`` and the
# commands that need no agent start without the kernel.
if TYPE_CHECKING:
    from ..kernel.agent import Agent
    from ..phases import Phases
    from ..policy import Policy

__all__ = [
    "PROG",
    "STORE_ENV",
    "UsageError",
    "add_store_option",
    "existing_store",
    "finite_positive_float",
    "mask_url",
    "nonempty_text",
    "nonnegative_int",
    "positive_int",
    "read_policy",
    "store_url",
    "the_store",
    "writable_file",
    "write_output",
]

PROG = "fsm-agent"
"""The program's name, as errors and ``--help`` show it."""

STORE_ENV = "FSM_AGENT_STORE"
"""The environment variable a command reads for its checkpoint store when ``--store`` is left
out (which also keeps a database password out of the process list)."""

_SQLITE = "sqlite:///"
_POSTGRES = ("postgresql://", "postgres://")


class UsageError(FsmAgentError):
    """Bad input found by a command (a file that is missing or invalid, options that do not go
    together): printed as one line on stderr, exit code 2."""


def read_policy(path: str | os.PathLike[str]) -> Policy:
    """The :class:`Policy` in the JSON file ``path``; a file that cannot be read, is not JSON or
    does not validate is a :class:`UsageError` naming the file and what is wrong."""
    from pydantic import ValidationError

    from ..policy import Policy

    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot read policy file {str(path)!r}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise UsageError(f"policy file {str(path)!r} is not UTF-8 text") from None
    try:
        return Policy.model_validate_json(text)
    except ValidationError as exc:  # not JSON at all: the policy reports its own field errors
        raise UsageError(f"{path}: not a valid policy: {exc.errors()[0]['msg']}") from None
    except ConfigurationError as exc:
        raise UsageError(f"{path}: {exc}") from None


def load_phases(spec: str) -> Phases:
    """The :class:`~fsm_agent.phases.Phases` named ``module:attribute`` (the module is
    imported, so it runs: name only your own code)."""
    from ..phases import Phases

    value = _load("--phases", spec, "myagent:PHASES")
    if not isinstance(value, Phases):
        raise UsageError(f"--phases {spec} is a {type(value).__name__}, not a fsm_agent.Phases")
    return value


def load_agent(spec: str) -> Agent[Any, Any]:
    """The :class:`~fsm_agent.Agent` named ``module:attribute`` (the module is imported, so it
    runs: name only your own code)."""
    from ..kernel.agent import Agent

    value = _load("--agent", spec, "myagent:agent")
    if not isinstance(value, Agent):
        raise UsageError(f"--agent {spec} is a {type(value).__name__}, not a fsm_agent.Agent")
    return value


def _load(option: str, spec: str, example: str) -> object:
    """The value ``module:attribute`` names, importing the module from the working directory."""
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise UsageError(f"{option} takes MODULE:ATTRIBUTE (e.g. {example}), got {spec!r}")
    sys.path.insert(0, os.getcwd())
    try:
        return getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as exc:
        raise UsageError(f"{option} {spec}: {exc}") from None
    finally:
        sys.path.remove(os.getcwd())


def positive_int(text: str) -> int:
    """A whole number of at least 1."""
    return _whole_number(text, minimum=1)


def nonnegative_int(text: str) -> int:
    """A whole number of at least 0."""
    return _whole_number(text, minimum=0)


def _whole_number(text: str, *, minimum: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, not {text!r}") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"must be at least {minimum}, not {value}")
    return value


def finite_positive_float(text: str) -> float:
    """A number of seconds (or any amount) greater than 0 and finite: not ``nan`` or ``inf``."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, not {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a finite number greater than 0, not {text!r}")
    return value


def nonempty_text(text: str) -> str:
    """Text with something in it besides white space."""
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be empty")
    return text


def writable_file(text: str) -> str:
    """A file path that can be written: its directory exists and is writable, and the path is
    not a directory. Checked before the work starts, so a run is not lost to a typo."""
    if not text:
        raise argparse.ArgumentTypeError("expected a file path, not an empty string")
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is a directory, not a file")
    parent = path.parent
    if not parent.is_dir():
        raise argparse.ArgumentTypeError(f"cannot write {text!r}: no directory {str(parent)!r}")
    writable = os.access(path, os.W_OK) if path.exists() else os.access(parent, os.W_OK | os.X_OK)
    if not writable:
        raise argparse.ArgumentTypeError(f"cannot write {text!r}: permission denied")
    return text


def existing_store(text: str) -> str:
    """A checkpoint store to read: ``sqlite:///PATH`` or a plain path naming an existing SQLite
    file (never created by reading it), or a ``postgresql://`` URL."""
    if text.startswith(_POSTGRES):
        return text
    if "://" in text and not text.startswith(_SQLITE):
        raise argparse.ArgumentTypeError(
            f"unknown store {mask_url(text)!r}: use a SQLite path, sqlite:///PATH or postgresql://…"
        )
    path = text.removeprefix(_SQLITE)
    if not Path(path).is_file():
        raise argparse.ArgumentTypeError(f"no SQLite store at {path!r}")
    return text


def add_store_option(parser: argparse.ArgumentParser, *aliases: str, purpose: str = "") -> None:
    """Add ``--store PATH_OR_DSN`` (and the older spellings ``aliases``) to a command that reads
    a checkpoint store; :func:`the_store` resolves it, or :data:`STORE_ENV` when it is left out."""
    also = f"; {', '.join(aliases)} is an older spelling of it" if aliases else ""
    parser.add_argument(
        "--store",
        *aliases,
        dest="store",
        metavar="PATH_OR_DSN",
        type=existing_store,
        help=f"the checkpoint store{purpose}: a SQLite path, sqlite:///PATH or postgresql://… "
        f"(default: the environment variable {STORE_ENV}, which keeps a password out of the "
        f"process list){also}",
    )


def the_store(given: str | None) -> str:
    """The store a command was given, else the one :data:`STORE_ENV` names (checked as one
    given is); neither is a :class:`UsageError` naming both ways to give one."""
    if given is not None:
        return given
    from_env = os.environ.get(STORE_ENV, "")
    if not from_env:
        raise UsageError(
            f"no store: pass --store PATH_OR_DSN or set the environment variable {STORE_ENV}"
        )
    try:
        return existing_store(from_env)
    except argparse.ArgumentTypeError as exc:
        raise UsageError(f"{STORE_ENV}: {exc}") from None


def store_url(store: str) -> str:
    """``store`` as a URL: a plain SQLite path becomes ``sqlite:///PATH``."""
    return store if store.startswith((_SQLITE, *_POSTGRES)) else _SQLITE + store


def _password(url: str) -> str | None:
    _, sep, rest = url.partition("://")
    userinfo, at, _ = rest.rpartition("@")
    if not sep or not at or ":" not in userinfo:
        return None
    return userinfo.partition(":")[2] or None


def mask_url(url: str, text: str | None = None) -> str:
    """``text`` (default: ``url`` itself) with the password of ``url``'s user part replaced by
    ``***`` wherever it appears, so that a store's URL and its errors can be printed."""
    shown = url if text is None else text
    password = _password(url)
    return shown if password is None else shown.replace(password, "***")


def write_output(path: str, content: str | bytes) -> None:
    """Write ``content`` (text as UTF-8) to ``path``; failing to is a :class:`UsageError`."""
    data = content.encode() if isinstance(content, str) else content
    try:
        Path(path).write_bytes(data)
    except OSError as exc:
        raise UsageError(f"cannot write {path!r}: {exc.strerror}") from None


@contextlib.contextmanager
def reading(what: str) -> Iterator[None]:
    """Turn what reading a trace or a recording can raise into one-line usage errors that say
    ``cannot read {what}: ...``."""
    from ..diagrams.trace import TraceError

    try:
        yield
    except OSError as exc:
        raise UsageError(f"cannot read {what}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise UsageError(f"cannot read {what}: not UTF-8 text") from None
    except TraceError as exc:
        raise UsageError(str(exc)) from None
