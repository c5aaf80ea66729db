"""The public surface: one sorted __all__ that matches the real names, and typed reprs."""

from __future__ import annotations

import subprocess
import sys

import fsm_agent


def test_all_is_sorted_and_complete() -> None:
    """__all__ is sorted, unique, and every name in it exists."""
    names = fsm_agent.__all__
    assert names == sorted(names, key=str.lower) or names == sorted(names)
    assert len(set(names)) == len(names)
    for name in names:
        assert hasattr(fsm_agent, name), name


def test_public_classes_read_as_fsm_agent_names() -> None:
    """Reprs read `fsm_agent.Agent`, not the private module path (STYLE 11)."""
    assert fsm_agent.Agent.__module__ == "fsm_agent"
    assert fsm_agent.FsmAgentError.__module__ == "fsm_agent"


def test_every_error_derives_from_the_root() -> None:
    """One error tree rooted at FsmAgentError; control-flow signals stay outside it."""
    signals = (fsm_agent.TaskComplete, fsm_agent.HumanInputRequired)
    for name in fsm_agent.__all__:
        value = getattr(fsm_agent, name)
        if isinstance(value, type) and issubclass(value, Exception) and value not in signals:
            assert issubclass(value, fsm_agent.FsmAgentError), name


def test_importing_the_package_does_not_import_optional_extras() -> None:
    """`import fsm_agent` needs only the core dependencies (no hypothesis, no graphviz)."""
    code = (
        "import sys, fsm_agent; "
        "print(sorted(m for m in ('hypothesis', 'pygraphviz', 'graphviz') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_design_snippet_runs_as_written() -> None:
    """The DESIGN §9 example runs as written."""
    from fsm_agent import Agent, Policy, StopReason, tool
    from fsm_agent.testing import ScriptedModel, text, tool_call

    @tool
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    agent = Agent(
        ScriptedModel([tool_call("add", {"a": 1, "b": 2}), text("3")]),
        tools=[add],
        system_prompt="Be brief.",
        policy=Policy(max_steps=10),
    )
    result = agent.run_sync("What is 1 + 2?")
    assert (result.output, result.stop_reason) == ("3", StopReason.COMPLETED)
    assert result.usage.requests == 2 and len(result.trace) > 0 and result.messages


def test_the_scripted_models_old_path_imports_the_same_doubles() -> None:
    """``fsm_agent.scripted``, the scripted model's old path, still imports, without a warning,
    and its names are ``fsm_agent.testing.scripted``'s own objects."""
    code = (
        "import fsm_agent.scripted as old, fsm_agent.testing.scripted as new; "
        "print(old.__all__ == new.__all__, "
        "all(getattr(old, name) is getattr(new, name) for name in new.__all__))"
    )
    out = subprocess.run(
        [sys.executable, "-W", "error", "-c", code], capture_output=True, text=True, check=True
    )
    assert (out.stdout.strip(), out.stderr) == ("True True", "")
