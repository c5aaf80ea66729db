"""``fsm-agent check``: prove a policy terminates within its bounds, from the command line: the
parametric proof over the table first, the exhaustive exploration on request."""

from __future__ import annotations

import argparse
import json
from typing import Any

from ..analysis.bounds import Bounds, bounds
from ..analysis.checker import DEFAULT_MAX_STATES, check
from ..analysis.checker.phases import PhaseCheck, check_phases
from ..analysis.formulas import FORMULAS, evaluate_all
from ..analysis.proof import Proof, prove
from ..kernel.agent import Agent
from ..kernel.composition import AgentTool
from ..kernel.handoffs import graph_agents
from ..kernel.plan import plan_of
from ..machine.guards import Limits
from ..phases import Phases
from ..policy import Policy, limits_of
from .args import (
    UsageError,
    finite_positive_float,
    load_agent,
    load_phases,
    positive_int,
    read_policy,
)

__all__ = ["add_check_arguments", "run_check_command"]


def add_check_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the options of ``fsm-agent check`` to ``parser``."""
    parser.add_argument(
        "--policy", metavar="FILE", help="a Policy as JSON (default: the default policy)"
    )
    parser.add_argument(
        "--agent",
        metavar="MODULE:ATTR",
        help="check an Agent: its policy, verifier, output type and model chain, and the agents "
        "it uses as tools, whose worst cases its bounds include (instead of --policy)",
    )
    parser.add_argument(
        "--verifier", action="store_true", help="check with a verifier (or require_done_tool)"
    )
    parser.add_argument(
        "--output-type",
        action="store_true",
        help="check an agent with an output type (answers that do not validate are rejected)",
    )
    parser.add_argument(
        "--models",
        metavar="N",
        type=positive_int,
        default=1,
        help="the agent's model chain holds N models (a FallbackModel of a primary and N - 1 "
        "others; default 1)",
    )
    parser.add_argument(
        "--no-stop-conditions",
        action="store_true",
        help="the agent has no stop conditions (their rows are then reported as disabled)",
    )
    parser.add_argument(
        "--model-call-budget",
        metavar="N",
        type=positive_int,
        help="also prove that no run makes more than N model calls",
    )
    parser.add_argument(
        "--model-timeout",
        metavar="SECONDS",
        type=finite_positive_float,
        help="the longest one model call can take (for the wall-clock bound)",
    )
    parser.add_argument(
        "--max-states",
        metavar="N",
        type=positive_int,
        default=DEFAULT_MAX_STATES,
        help=f"give up after N abstract states (default {DEFAULT_MAX_STATES:,})",
    )
    parser.add_argument(
        "--explore",
        action="store_true",
        help="also explore every abstract state of the policy (exhaustive; slower as the "
        "limits grow)",
    )
    parser.add_argument("--json", action="store_true", help="print the exploration as JSON")
    parser.add_argument(
        "--phases",
        metavar="MODULE:ATTR",
        help="also check a phase table (a fsm_agent.Phases) with the loop: termination, a bound "
        "per phase, goal reachability, phase cycles with no exit",
    )
    parser.add_argument(
        "--phase-turns",
        metavar="N",
        type=positive_int,
        help="explore the phases under N turns (default: the policy's max_steps)",
    )


def run_check_command(args: argparse.Namespace) -> int:
    """Run ``fsm-agent check``: the parametric proof first, then the exhaustive search when asked
    (``--explore``, ``--json``, ``--model-call-budget``) or when the proof does not cover the
    policy. Exit 0 when proven, 1 on a violation or an inconclusive search, 2 when the policy
    file cannot be read."""
    policy = Policy() if args.policy is None else read_policy(args.policy)
    agent = None
    if args.agent is not None:
        if args.policy is not None:
            raise UsageError("--agent checks the agent's own policy: leave out --policy")
        agent = load_agent(args.agent)
        policy = agent.policy
        # The agent's own settings stand for the flags that describe an agent.
        args.verifier = args.verifier or agent.verifier is not None
        plan = plan_of(agent)
        args.output_type = args.output_type or plan.output_spec is not None
        args.models = len(plan.models)
    phases = agent.phases if agent is not None else None
    if args.phases is not None:
        if agent is not None:
            raise UsageError("--agent checks the agent's own phases: leave out --phases")
        phases = load_phases(args.phases)
    phase_check = None if phases is None else _check_phases(args, policy, phases)
    turns = _phase_turns(phase_check, policy)
    proof = prove()
    limits = limits_of(
        policy,
        verification=args.verifier,
        models=args.models,
        output_validation=args.output_type,
    )
    why = _why_explore(args, proof, limits)
    if why is None:
        print(_parametric(proof, policy, args, agent, turns=turns))
        return _phases_verdict(phase_check, 0)
    report = check(
        policy,
        verification=args.verifier,
        stop_conditions=not args.no_stop_conditions,
        models=args.models,
        model_timeout_s=args.model_timeout,
        model_call_budget=args.model_call_budget,
        max_states=args.max_states,
        output_validation=args.output_type,
    )
    if args.json:
        data = report.to_dict()
        data["parametric"] = {
            "terminates": proof.terminates,
            "relies_on": [b.value for b in proof.relies_on],
            "measures": [[m.counter.value, m.limit.value] for m in proof.measures],
            "unranked": [[s.value for s in stuck.states] for stuck in proof.stuck],
        }
        print(json.dumps(data, indent=2))
        return 0 if report.proven else 1
    print(_parametric(proof, policy, args, agent, verdict=False, turns=turns))
    print(f"exploring every abstract state: {why}")
    print(report.format())
    return _phases_verdict(phase_check, 0 if report.proven else 1)


def _check_phases(args: argparse.Namespace, policy: Policy, phases: Phases) -> PhaseCheck:
    """The phase table explored with the loop (under ``--phase-turns``, else the policy's
    ``max_steps``)."""
    turns = args.phase_turns or policy.max_steps
    if turns is None:
        raise UsageError("the policy sets no max_steps: pass --phase-turns N to bound the search")
    return check_phases(phases, turns)


def _phase_turns(phase_check: PhaseCheck | None, policy: Policy) -> tuple[int, str] | None:
    """The turns the phase budgets allow, when the search covered the policy's whole step
    bound and found fewer (a smaller ``--phase-turns`` search bounds nothing)."""
    if phase_check is None or not phase_check.complete or policy.max_steps is None:
        return None
    if phase_check.max_steps < policy.max_steps or phase_check.max_turns >= policy.max_steps:
        return None
    return phase_check.max_turns, "its phases' step budgets, explored with the loop"


def _phases_verdict(phase_check: PhaseCheck | None, code: int) -> int:
    """Print the phase report after the loop's, when there is one; the exit code of both."""
    if phase_check is None:
        return code
    print("\n".join(phase_check.lines()))
    print("PASSED" if phase_check.ok else "FAILED")
    return code if phase_check.ok else 1


def _show(value: int | None) -> str:
    return "unbounded" if value is None else str(value)


def _why_explore(args: argparse.Namespace, proof: Proof, limits: Limits) -> str | None:
    """Why the exhaustive search runs after the proof, or ``None`` when the proof suffices."""
    if args.explore:
        return "--explore"
    if args.json:
        return "--json prints the exploration"
    if args.model_call_budget is not None:
        return "--model-call-budget is checked against every run"
    if not proof.terminates:
        return "the parametric proof leaves a cycle unranked"
    unset = proof.unbounded_by(limits)
    if unset:
        names = ", ".join(f"{b.value}=None" for b in unset)
        return f"the proof relies on {names}; only the driver's limits can end such a run"
    return None


def _parametric(
    proof: Proof,
    policy: Policy,
    args: argparse.Namespace,
    agent: Agent[Any, Any] | None = None,
    *,
    verdict: bool = True,
    turns: tuple[int, str] | None = None,
) -> str:
    """The parametric verdict, the formulas, and their values for ``policy``; for an
    ``agent`` with children or handoffs, its bounds with theirs and each child's (``turns``:
    the turns its phase budgets allow)."""
    own = bounds(
        policy,
        verification=args.verifier or args.output_type,
        model_timeout_s=args.model_timeout,
        models=args.models,
        turns=turns,
    )
    computed, children = own, []
    if agent is not None:
        computed = agent.bounds(model_timeout_s=args.model_timeout)
        children = _children(agent, args.model_timeout)
    head = "PROVEN for every policy that sets " + " and ".join(b.value for b in proof.relies_on)
    if not proof.terminates:
        head = "NOT PROVEN"
    lines = [
        f"check (parametric): {head} ({proof.elapsed_s * 1000:.1f} ms)"
        if verdict
        else f"parametric proof: {head}",
        *(f"  {line}" for line in proof.lines()),
        "  bounds, as formulas over the limits (None is infinite; a >= b reads 1 or 0):",
        *(
            f"    {name:<16} = {formula} = {_show(value)}"
            for (name, formula), value in zip(
                FORMULAS.items(), evaluate_all(policy, models=args.models).values(), strict=True
            )
        ),
        "  for this agent and its children, with the derivations:"
        if children
        else "  for this agent, with the derivations:"
        if agent is not None
        else "  for this policy, with the derivations:",
        *(f"    {line}" for line in computed.lines()),
    ]
    if children:
        lines += ["  its own run, children left out:", *(f"    {line}" for line in own.lines())]
    for name, times, child in children:
        lines.append(f"  the child {name!r}, called at most {_show(times)} times in a run:")
        lines += [f"    {line}" for line in child.lines()]
    return "\n".join(lines)


def _children(
    agent: Agent[Any, Any], model_timeout_s: float | None
) -> list[tuple[str, int | None, Bounds]]:
    """Each agent ``agent`` uses as a tool: its name, the most times a run calls it, and its
    worst case (its own children's included)."""
    times = agent.policy.max_tool_calls
    agents = graph_agents(agent) if agent.handoffs else [agent]
    return [
        (tool.name, times, tool.agent.bounds(model_timeout_s=model_timeout_s))
        for each in agents
        for tool in each.tools.values()
        if isinstance(tool, AgentTool)
    ]
