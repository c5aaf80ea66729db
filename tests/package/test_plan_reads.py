"""Outside the kernel, an agent's compiled plan is read through one documented function.

:func:`fsm_agent.kernel.plan.plan_of` is how the CLI, the fuzzer, observability, replay, the
testing tools and the inspector read what an agent compiled; the ``_plan`` attribute it returns
is the kernel's own, so no module outside ``fsm_agent/kernel/`` names it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import fsm_agent
from fsm_agent import Agent, Policy
from fsm_agent.kernel.plan import Plan, plan_of
from fsm_agent.testing import ScriptedModel

PACKAGE = Path(fsm_agent.__file__).parent


def private_plan_reads(root: Path, *, inside: str = "kernel") -> list[str]:
    """Each ``._plan`` attribute named in a module under ``root`` but outside its ``inside``
    folder, as ``path:line``."""
    found: list[str] = []
    for path in sorted(root.rglob("*.py")):
        if path.relative_to(root).parts[0] == inside:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr == "_plan":
                found.append(f"{path.relative_to(root.parent)}:{node.lineno}")
    return found


def test_no_module_outside_the_kernel_reads_the_private_plan() -> None:
    """No module of the package outside ``fsm_agent/kernel/`` reads ``agent._plan``."""
    assert private_plan_reads(PACKAGE) == []


def test_a_private_plan_read_outside_the_kernel_is_found(tmp_path: Path) -> None:
    """The walk names a ``._plan`` read outside the kernel folder with its place, and lets the
    kernel's own pass."""
    root = tmp_path / "pkg"
    (root / "kernel").mkdir(parents=True)
    (root / "kernel" / "agent.py").write_text("def f(agent):\n    return agent._plan\n")
    (root / "cli.py").write_text("import x\n\n\ndef g(agent):\n    return agent._plan.models\n")
    assert private_plan_reads(root) == ["pkg/cli.py:5"]


def test_plan_of_follows_the_agents_policy() -> None:
    """``plan_of`` returns the plan the agent's next run follows, a new one after the policy is
    assigned."""
    agent: Agent[None, str] = Agent(ScriptedModel([]), policy=Policy(max_steps=7))
    first = plan_of(agent)
    assert isinstance(first, Plan)
    assert first.policy.max_steps == 7
    agent.policy = Policy(max_steps=9)
    assert plan_of(agent) is not first
    assert plan_of(agent).policy.max_steps == 9
