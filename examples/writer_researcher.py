"""A writer agent with a researcher agent as a tool, and the bound of the pair.

The writer's model hands questions to the researcher (``researcher.as_tool``); the researcher
runs its own machine with its own tools and answers; the writer writes. The researcher's model
calls count against the writer's ``usage_limits``, and ``writer.bounds()`` adds the
researcher's worst case, times the most calls the writer can make of it, to the writer's own.

Offline it runs on scripted models. With ``WRITER_MODEL=provider:model`` (and that provider's
server, e.g. ``OPENAI_BASE_URL`` of a local llama.cpp server) both agents run on a real one.

Prove the composed bound from the command line, from the repository's root::

    fsm-agent check --agent examples.writer_researcher:writer --model-timeout 60
"""

from __future__ import annotations

import asyncio
import os
import sys

from fsm_agent import Agent, Model, Policy, RetryPolicy, UsageLimits, tool
from fsm_agent.testing import ScriptedModel, text, tool_call

ARCHIVE = {
    "tides": "Tides are caused mainly by the Moon's gravity; the Sun adds about half as much.",
    "spring tides": "Spring tides come when the Sun and the Moon line up, at new and full moon.",
}


@tool
def search_archive(topic: str) -> str:
    """Search the archive for a topic; answers with the archive's note on it."""
    return ARCHIVE.get(topic.lower(), f"nothing on {topic!r}; try a shorter topic")


def build_researcher(model: Model) -> Agent[None]:
    """The researcher: one question in, a sentence out, at most 3 turns and 3 searches."""
    return Agent(
        model,
        tools=[search_archive],
        system_prompt="You answer one research question in one sentence, from the archive.",
        policy=Policy(max_steps=3, max_tool_calls=3, retry=RetryPolicy(max_retries=1)),
    )


def build_writer(model: Model, researcher: Agent[None]) -> Agent[None]:
    """The writer: asks the researcher at most twice, writes, and stops within 4 turns and 20
    model calls in all (its own and the researcher's)."""
    return Agent(
        model,
        tools=[
            researcher.as_tool(
                name="research",
                description="Ask the researcher one question; it answers from the archive.",
            )
        ],
        system_prompt="You write short, accurate explainers. Research before you write.",
        policy=Policy(
            max_steps=4,
            max_tool_calls=2,
            retry=RetryPolicy(max_retries=1),
            usage_limits=UsageLimits(max_requests=20),
        ),
    )


RESEARCHER_SCRIPT = [
    tool_call("search_archive", {"topic": "tides"}),
    text("The Moon's gravity causes the tides, with the Sun adding about half as much."),
    tool_call("search_archive", {"topic": "spring tides"}),
    text("Spring tides happen at new and full moon, when the Sun and the Moon line up."),
]
WRITER_SCRIPT = [
    tool_call("research", {"task": "What causes the tides?"}),
    tool_call("research", {"task": "When are tides strongest?"}),
    text(
        "Tides rise and fall because the Moon pulls on the oceans, and the Sun adds about "
        "half as much again. They are strongest, spring tides, at new and full moon."
    ),
]

# Scripted models by default, so that ``fsm-agent check --agent`` can import this module.
writer = build_writer(
    ScriptedModel(WRITER_SCRIPT), build_researcher(ScriptedModel(RESEARCHER_SCRIPT))
)


async def main() -> None:
    spec = os.environ.get("WRITER_MODEL")
    task = "Write a two-sentence explainer on tides."
    if spec is None:
        result = await writer.run(task)
    else:
        from fsm_agent.providers import infer_model

        async with infer_model(spec) as model:  # closes its HTTP connections at the end
            result = await build_writer(model, build_researcher(model)).run(task)
    bound = writer.bounds(model_timeout_s=60)
    if not result.ok:  # result.error says why: no key, no server, a limit reached
        sys.exit(f"the run failed ({result.stop_reason.value}): {result.error}")
    print(f"{result.stop_reason.value}: {result.output}")
    print(
        f"model calls: {result.usage.requests} answered in {result.model_calls} attempts "
        "(the writer's and the researcher's)"
    )
    print("the pair's bounds:")
    for line in bound.lines():
        print(f"  {line}")
    assert bound.max_model_calls is not None
    assert result.model_calls <= bound.max_model_calls
    if spec is None:
        assert result.ok
        assert result.model_calls == 7


if __name__ == "__main__":
    asyncio.run(main())
