"""The fingerprint of an agent's definition, stored with each of its durable runs.

A run resumed by another agent than the one that started it would mix two definitions: calls
the first agent's model made to tools the second does not have, a policy whose limits the
stored counters were not counted under. The fingerprint names the parts that matter (the tools
with their schemas and flags, the system prompt, the policy) by a short digest each, so a
mismatch can say which part changed.
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Protocol

from ..errors import DefinitionChangedError

if TYPE_CHECKING:
    from ..phases import CompiledPhases, Phase
    from ..policy import Policy
    from ..run.output import OutputSpec
    from ..tools import ToolRegistry

__all__ = ["Defined", "check_definition", "definition_fingerprint"]


class Defined(Protocol):
    """The parts of an agent's definition that its fingerprint reads (a compiled plan)."""

    @property
    def tools(self) -> ToolRegistry:
        """The tools offered, through any adapter."""
        ...

    @property
    def system_prompt(self) -> str | None:
        """The system prompt."""
        ...

    @property
    def policy(self) -> Policy:
        """The policy."""
        ...

    @property
    def phases(self) -> CompiledPhases | None:
        """The compiled phases, if any."""
        ...

    @property
    def output_spec(self) -> OutputSpec | None:
        """How answers are validated (``None``: text output)."""
        ...


PARTS = ("tools", "system_prompt", "policy", "phases", "output")
"""The parts of an agent's definition the fingerprint covers, in its order (``phases`` only
for an agent with phases and ``output`` only for one with an output type, so the fingerprints
of the others stay as they were)."""


_PLAIN = frozenset({str, int, float, bool, type(None)})
"""The types of most values a fingerprint walks, returned as they are without further checks."""


def _canonical(value: object) -> object:
    """``value`` with every set as a sorted list: a set's iteration order depends on how it was
    built, so two equal policies could otherwise give two fingerprints."""
    if type(value) in _PLAIN:
        return value
    if isinstance(value, dict):
        return {key: _canonical(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_canonical(item) for item in value]
    if isinstance(value, set | frozenset):
        return sorted((_canonical(item) for item in value), key=repr)
    return value


def _digest(value: object) -> str:
    text = json.dumps(
        _canonical(value), sort_keys=True, separators=(",", ":"), ensure_ascii=True, default=str
    )
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def definition_fingerprint(plan: Defined) -> str:
    """``tools=…;system_prompt=…;policy=…``: a digest of each part of an agent's definition,
    read from its compiled plan."""
    tools = sorted(
        (
            tool.name,
            tool.definition.description,
            tool.definition.parameters,
            tool.idempotent,
            tool.needs_approval,
        )
        for tool in plan.tools.values()
    )
    parts = {
        "tools": _digest(tools),
        "system_prompt": _digest(plan.system_prompt),
        "policy": _digest(_policy(plan)),
    }
    phases = plan.phases
    if phases is not None:
        table = phases.phases
        parts["phases"] = _digest(
            {
                "phases": [_phase(p) for p in table.phases],
                "transitions": [
                    [t.source, t.dest, t.label, getattr(t.guard, "__qualname__", None)]
                    for t in table.transitions
                ],
                "initial": table.initial,
                "goals": sorted(table.goals),
            }
        )
    spec = plan.output_spec
    if spec is not None:
        parts["output"] = _digest(spec.schema.json_schema)
    return ";".join(f"{name}={parts[name]}" for name in PARTS if name in parts)


def _policy(plan: Defined) -> dict[str, object]:
    """The policy as the fingerprint sees it: ``max_handoffs`` only when it is set, so the
    fingerprints of the policies written before it stay as they were."""
    dumped = plan.policy.model_dump()
    if dumped.get("max_handoffs") is None:
        del dumped["max_handoffs"]
    return dumped


def _phase(phase: Phase) -> list[object]:
    """A phase as the fingerprint sees it; its exit check (by its module and qualified name)
    only when it has one, so the fingerprints of phases without one stay as they were."""
    described: list[object] = [
        phase.name,
        list(phase.tools),
        phase.instructions,
        phase.max_steps,
        phase.on_budget,
    ]
    if phase.exit_check is not None:
        described.append({"exit_check": _name(phase.exit_check)})
    return described


def _name(function: object) -> str:
    """A callable's module and qualified name (its class's, for a callable object)."""
    named = function if hasattr(function, "__qualname__") else type(function)
    return f"{getattr(named, '__module__', '')}.{getattr(named, '__qualname__', '')}"


def _parts(fingerprint: str) -> dict[str, str]:
    return dict(item.partition("=")[::2] for item in fingerprint.split(";"))


def check_definition(run_id: str, stored: str | None, current: str) -> None:
    """Raise :class:`~fsm_agent.DefinitionChangedError` when a run started under ``stored``
    resumes under ``current`` (a run stored without a fingerprint passes)."""
    if stored is None or stored == current:
        return
    old, new = _parts(stored), _parts(current)
    changed = tuple(name for name in PARTS if old.get(name) != new.get(name)) or PARTS
    raise DefinitionChangedError(
        f"run {run_id!r} was started by an agent with other {', '.join(changed)}; resuming it "
        "would mix the two. Resume it with the agent that started it, or pass "
        "allow_changed_definition=True to resume it under this one",
        run_id=run_id,
        changed=changed,
    )
