"""A plan -> act -> check agent: read-only tools while planning, write tools while acting, only
the test runner while checking. A failing test run moves the task back to acting (a move by
code); the model moves forward with the generated ``move_to_phase`` tool.

Offline it runs on a scripted model. With ``PLAN_ACT_CHECK_MODEL=provider:model`` (and that
provider's server, e.g. ``OPENAI_BASE_URL`` of a local llama.cpp server) it runs on a real one.

Check and draw the phases with the loop, from the repository's root::

    fsm-agent check --phases examples.plan_act_check:PHASES --phase-turns 12
    fsm-agent diagram --phases examples.plan_act_check:PHASES --format mermaid
"""

from __future__ import annotations

import asyncio
import os
import sys

from fsm_agent import Agent, Model, Policy, RetryPolicy, tool
from fsm_agent.phases import MOVE_TOOL, MovePhase, Phase, Phases
from fsm_agent.testing import ScriptedModel, text, tool_call

FILES: dict[str, str] = {"greet.py": "def greet(name):\n    return 'hello ' + name\n"}


@tool
def read_file(path: str) -> str:
    """Read a file of the project."""
    return FILES.get(path, f"no file {path}")


@tool
def write_file(path: str, content: str) -> str:
    """Write a file of the project."""
    FILES[path] = content
    return f"wrote {len(content)} characters to {path}"


@tool
def run_tests() -> str | MovePhase:
    """Run the project's tests."""
    if "Hello" in FILES["greet.py"]:
        return "1 passed"
    return MovePhase("act", "1 failed: greet('Ada') should be 'Hello, Ada!'")


PHASES = Phases(
    [
        Phase("plan", ("read_file",), "Plan: read what you need, then move to 'act'."),
        Phase("act", ("read_file", "write_file"), "Act: make the change, then move to 'check'."),
        Phase("check", ("run_tests",), "Check: run the tests.", max_steps=3, on_budget="act"),
    ],
    [("plan", "act"), ("act", "check"), ("check", "act")],
    goals=["check"],
)

FIXED = "def greet(name):\n    return f'Hello, {name}!'\n"
SCRIPT = [
    tool_call("read_file", {"path": "greet.py"}),
    tool_call("write_file", {"path": "greet.py", "content": FIXED}),  # refused: still planning
    tool_call(MOVE_TOOL, {"phase": "check"}),  # refused: check may not follow plan
    tool_call(MOVE_TOOL, {"phase": "act"}),
    tool_call(MOVE_TOOL, {"phase": "check"}),
    tool_call("run_tests", {}),  # fails: the tool moves the task back to act
    tool_call("write_file", {"path": "greet.py", "content": FIXED}),
    tool_call(MOVE_TOOL, {"phase": "check"}),
    tool_call("run_tests", {}),
    text("greet now says 'Hello, <name>!' and the tests pass."),
]


def build(model: Model) -> Agent[None]:
    """The agent on ``model``."""
    return Agent(
        model,
        tools=[read_file, write_file, run_tests],
        system_prompt="You maintain a small Python project.",
        policy=Policy(max_steps=12, retry=RetryPolicy(max_retries=2)),  # about 3 s of retries
        phases=PHASES,
    )


async def main() -> None:
    spec = os.environ.get("PLAN_ACT_CHECK_MODEL")
    task = "Make greet() say 'Hello, <name>!'."
    if spec is None:
        result = await build(ScriptedModel(SCRIPT)).run(task)
    else:
        from fsm_agent.providers import infer_model

        async with infer_model(spec) as model:  # closes its HTTP connections at the end
            result = await build(model).run(task)
    if not result.ok:  # result.error says why: no key, no server, a limit reached
        sys.exit(f"the run failed ({result.stop_reason.value}): {result.error}")
    assert result.run_state is not None
    path = " -> ".join(change.dest for change in result.run_state.phase_trace)
    print(f"{result.stop_reason.value} in phase {result.run_state.phase}: {result.output}")
    print(f"phases: {path}")
    if spec is None:
        assert path == "plan -> act -> check -> act -> check"
        assert "Hello" in FILES["greet.py"]


if __name__ == "__main__":
    asyncio.run(main())
