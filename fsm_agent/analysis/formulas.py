"""The closed-form bounds as formulas over the limits: printed as written, evaluated as written.

Each formula is a small arithmetic expression over a policy's limits (``+``, ``-``, ``*``,
``min``, ``max`` and ``a >= b``, which reads 1 or 0). A limit of ``None`` is infinite: ``min``
ignores it, a sum or product with it is infinite (times 0 is 0), and ``None >= x`` holds. So the
same text covers every policy, and :func:`evaluate` computes a policy's number from the very text
``fsm-agent check`` prints; a test proves the numbers equal :func:`fsm_agent.analysis.bounds.bounds`
and the explorer's worst runs.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Mapping

from ..errors import FsmAgentError
from ..policy import CompactionStrategyName, Policy

__all__ = ["FORMULAS", "FormulaError", "evaluate", "evaluate_all", "variables"]

_WORK = (
    "max_steps + min((max_steps + max_model_switches) * max_retries + max_model_switches,"
    " max_total_errors - 1)"
    " + max_steps * max_compaction_attempts * summarize_strategy"
)

FORMULAS: Mapping[str, str] = {
    "model calls": (f"min({_WORK} + summarize_on_max_steps, max_requests)"),
    "tool turns": "min(max_steps, max_requests)",
    "tool executions": "max_tool_calls",
}
"""The worst case of a run, by what it counts. ``summarize_strategy`` is 1 when compaction may
summarise (one model call per compaction), ``summarize_on_max_steps`` 1 when the step limit ends
with a summary call, ``max_model_switches`` a fallback chain's length less one; the others are the
policy's limits (``max_requests`` is ``usage_limits.max_requests``)."""


class FormulaError(FsmAgentError):
    """A formula uses syntax or a name the evaluator does not know."""


def variables(policy: Policy, *, models: int = 1) -> dict[str, float]:
    """The values the formulas read from ``policy`` and the length of the model chain (``None``
    limits as infinity)."""

    def limit(value: int | None) -> float:
        return math.inf if value is None else float(value)

    summarize = CompactionStrategyName.SUMMARIZE in policy.compaction.strategies
    return {
        "max_steps": limit(policy.max_steps),
        "max_retries": limit(policy.retry.max_retries),
        "max_model_switches": float(max(0, models - 1)),
        "max_total_errors": limit(policy.max_total_errors),
        "max_compaction_attempts": limit(policy.max_compaction_attempts),
        "max_requests": limit(policy.usage_limits.max_requests),
        "max_tool_calls": limit(policy.max_tool_calls),
        "summarize_on_max_steps": float(policy.summarize_on_max_steps),
        "summarize_strategy": float(summarize),
    }


def evaluate(formula: str, values: Mapping[str, float]) -> int | None:
    """The value of ``formula`` under ``values`` (``None``: unbounded)."""
    try:
        tree = ast.parse(formula, mode="eval")
    except SyntaxError as exc:
        raise FormulaError(f"not a formula: {formula!r}") from exc
    result = _value(tree.body, values)
    return None if math.isinf(result) else int(result)


def evaluate_all(policy: Policy, *, models: int = 1) -> dict[str, int | None]:
    """Every formula of :data:`FORMULAS` evaluated for ``policy`` (and a chain of ``models``)."""
    values = variables(policy, models=models)
    return {name: evaluate(formula, values) for name, formula in FORMULAS.items()}


def _value(node: ast.expr, values: Mapping[str, float]) -> float:
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
        return float(node.value)
    if isinstance(node, ast.Name):
        if node.id not in values:
            raise FormulaError(f"unknown name {node.id!r}")
        return values[node.id]
    if isinstance(node, ast.BinOp):
        left, right = _value(node.left, values), _value(node.right, values)
        if isinstance(node.op, ast.Add):
            return left + right
        if isinstance(node.op, ast.Sub):
            return left - right if not math.isinf(left) else left
        if isinstance(node.op, ast.Mult):
            return 0.0 if left == 0 or right == 0 else left * right
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], ast.GtE):
        return float(_value(node.left, values) >= _value(node.comparators[0], values))
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in ("min", "max")
        and node.args
        and not node.keywords
    ):
        args = [_value(arg, values) for arg in node.args]
        return min(args) if node.func.id == "min" else max(args)
    raise FormulaError(f"unsupported syntax: {ast.unparse(node)}")
