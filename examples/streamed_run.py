"""A run printed as it happens: every event of ``run_stream``, text as it streams.

Uses a scripted model so it runs offline; pass any provider model instead (see
provider_from_env.py): the events are the same.
"""

from __future__ import annotations

import asyncio
import sys

from fsm_agent import Agent, tool
from fsm_agent.testing import ScriptedModel, text, tool_call


@tool
def word_count(sentence: str) -> int:
    """Count the words of a sentence."""
    return len(sentence.split())


async def main() -> None:
    model = ScriptedModel(
        [
            tool_call("word_count", {"sentence": "the quick brown fox"}),
            text("The sentence has 4 words."),
        ]
    )
    agent = Agent(model, tools=[word_count])
    streaming = False  # in the middle of a line of streamed text
    async for event in agent.run_stream("How many words in 'the quick brown fox'?"):
        if event.type == "text_delta":
            print(event.text, end="", flush=True)
            streaming = True
            continue
        if streaming:
            print()
            streaming = False
        match event.type:
            case "state_changed":
                print(f"  [{event.source} --{event.outcome}--> {event.dest}]")
            case "tool_call":
                print(f"  calling {event.tool_name}({event.args})")
            case "tool_result":
                print(f"  {event.tool_name} -> {event.content}")
            case "usage":
                print(f"  usage so far: {event.total.total_tokens} tokens")
            case "final":
                print(f"final ({event.stop_reason}): {event.output}")
            case "aborted":  # the error says why: no key, no server, a limit reached
                sys.exit(f"the run failed ({event.stop_reason}): {event.error}")
            case "suspended":
                print("suspended: waiting for a human's answer")


if __name__ == "__main__":
    asyncio.run(main())
