"""``fsm-agent run``: an agent on a real provider, its answer streamed while its moves print."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from typing import TYPE_CHECKING

from ..errors import ConfigurationError
from ..policy import Policy, RetryPolicy
from ..run.events import AbortedEvent, FinalEvent
from .args import PROG, UsageError, nonempty_text, read_policy
from .trace import Trace, add_record_option, drive, ended_ok, labels, open_recording

if TYPE_CHECKING:
    from ..kernel.agent import Agent

__all__ = ["COMMAND_POLICY", "add_arguments", "handle"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``fsm-agent run``."""
    parser.add_argument("prompt", type=nonempty_text, help="the task for the agent")
    parser.add_argument(
        "--model",
        default=os.environ.get("FSM_AGENT_MODEL"),
        help="provider:model, e.g. openai:gpt-4o-mini, anthropic:claude-3-5-haiku-latest, "
        "gemini:gemini-2.0-flash (default: $FSM_AGENT_MODEL); the API key comes from the "
        "provider's usual environment variable",
    )
    parser.add_argument(
        "--base-url", help="the provider's base URL (e.g. a local OpenAI-compatible server)"
    )
    parser.add_argument("--system", help="the system prompt")
    parser.add_argument("--policy", metavar="FILE", help="a policy as JSON")
    parser.add_argument("--no-tools", action="store_true", help="offer the model no tools")
    add_record_option(parser)
    parser.add_argument(
        "-q", "--quiet", action="store_true", help="print only the answer, not the moves"
    )


COMMAND_POLICY = Policy(retry=RetryPolicy(max_retries=2))
"""The policy of ``fsm-agent run`` without ``--policy``: the library's default but for two
retries of a failed call (about 3 s) instead of five (about 30 s), since someone is waiting."""


def handle(args: argparse.Namespace) -> int:
    """Run the agent: 0 when the run ends in ``done``, 1 when it aborts or is suspended."""
    from ..kernel.agent import Agent
    from ..providers import infer_model
    from .demo import DEMO_TOOLS

    if not args.model:
        raise UsageError("no model: pass --model provider:model or set FSM_AGENT_MODEL")
    policy = COMMAND_POLICY if args.policy is None else read_policy(args.policy)
    try:
        model = infer_model(args.model, base_url=args.base_url)
        agent: Agent[None] = Agent(
            model,
            tools=() if args.no_tools else DEMO_TOOLS,
            system_prompt=args.system,
            policy=policy,
        )
    except ConfigurationError as exc:
        raise UsageError(str(exc)) from None
    out = open(os.devnull, "w", encoding="utf-8") if args.quiet else sys.stdout  # noqa: SIM115
    trace = Trace(out, labels(policy, verifier=False), stream_text=True)
    try:
        recorder = open_recording(args.record, agent, args.prompt)
        events = asyncio.run(drive(agent.run_stream(args.prompt), trace, recorder))
    finally:
        if out is not sys.stdout:
            out.close()
    last = events[-1] if events else None
    if args.quiet and isinstance(last, FinalEvent):
        print(last.output)
    if isinstance(last, AbortedEvent) and args.quiet:  # else the trace has just said it
        error = " ".join(str(last.error).split())
        print(f"{PROG}: run aborted ({last.stop_reason.value}): {error}", file=sys.stderr)
    return 0 if ended_ok(events) else 1
