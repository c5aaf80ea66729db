"""``fsm-agent replay``: re-run a recording with no network and say where it diverges."""

from __future__ import annotations

import argparse
import asyncio
import sys

from ..policy import Policy
from ..replay import compare, read_recording, replay_stream
from .args import read_policy, reading
from .trace import Trace, drive, labels

__all__ = ["add_arguments", "handle"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``fsm-agent replay``."""
    parser.add_argument("file", help="a recording (written by --record)")
    parser.add_argument(
        "--policy", metavar="FILE", help="replay under this policy (JSON) instead of the recorded"
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="print only the verdict")


def handle(args: argparse.Namespace) -> int:
    """Replay a recording: 0 when the replay matches it, 1 when it diverges."""
    with reading(repr(args.file)):
        recording = read_recording(args.file)
    policy: Policy | None = None if args.policy is None else read_policy(args.policy)
    shown = policy or recording.header.policy
    trace = None
    if not args.quiet:
        trace = Trace(
            sys.stdout, labels(shown, verifier=recording.header.verifier), stream_text=False
        )
    events = asyncio.run(drive(replay_stream(recording, policy=policy), trace))
    divergence = compare(recording, events)
    if divergence is None:
        print(f"replay matches the recording ({len(recording.events)} events)")
        return 0
    print(f"{args.file}: {divergence}", file=sys.stderr)
    return 1
