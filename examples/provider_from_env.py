"""An agent on a real provider, configured from the environment.

    FSM_AGENT_MODEL   provider:model (default openai:gpt-4o-mini); also anthropic:…, gemini:…
    OPENAI_API_KEY    the key (a local server needs none)
    OPENAI_BASE_URL   an OpenAI-compatible server, e.g. http://127.0.0.1:8000/v1 for vLLM,
                      http://127.0.0.1:11434/v1 for Ollama, http://127.0.0.1:8080/v1 for
                      llama.cpp (ANTHROPIC_API_KEY, GEMINI_API_KEY for the other providers)

Run: python examples/provider_from_env.py "What time is it in UTC?"

A run that fails (no key, no server, a limit reached) prints why on stderr and exits 1.
"""

from __future__ import annotations

import asyncio
import os
import sys
from datetime import UTC, datetime

from fsm_agent import Agent, Policy, RetryPolicy, tool
from fsm_agent.providers import infer_model


@tool
def utc_now() -> str:
    """The current date and time in UTC, ISO 8601."""
    return datetime.now(UTC).isoformat(timespec="seconds")


async def main(prompt: str) -> None:
    spec = os.environ.get("FSM_AGENT_MODEL", "openai:gpt-4o-mini")
    async with infer_model(spec) as model:  # closes its HTTP connections at the end
        agent = Agent(
            model,
            tools=[utc_now],
            system_prompt="Answer briefly. Use the tools when they help.",
            # Two retries of a failed call (about 3 s) instead of the default five (about
            # 30 s): someone is waiting, and a server that refuses the connection is not there.
            policy=Policy(max_steps=8, tool_timeout_s=5, retry=RetryPolicy(max_retries=2)),
        )
        result = await agent.run(prompt)
    if not result.ok:  # result.error says why: no key, no server, a limit reached
        sys.exit(f"[{spec}] the run failed ({result.stop_reason}): {result.error}")
    print(f"[{spec}] {result.stop_reason}: {result.output}")
    print(f"{result.usage.input_tokens} tokens in, {result.usage.output_tokens} out")


if __name__ == "__main__":
    asyncio.run(main(" ".join(sys.argv[1:]) or "What time is it in UTC?"))
