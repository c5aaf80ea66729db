"""A durable run with human approval, saved in SQLite.

The agent wants to refund an order; the refund tool needs a human's approval, so the run
suspends and is saved. A second process (here: a second agent object on the same database)
loads it by its run id, applies the human's decision and finishes it. Nothing runs twice:
the approved refund runs once, after the decision.

Run: python examples/durable_approval.py [approve|deny]
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

from fsm_agent import Agent, Model, StopReason, tool
from fsm_agent.persistence import SQLiteCheckpointer
from fsm_agent.run.approval import Approval
from fsm_agent.testing import ScriptedModel, text, tool_call

REFUNDS: list[str] = []  # what really happened


@tool(needs_approval=True)
def refund(order: str, amount: float) -> str:
    """Refund an order (a human approves every refund)."""
    REFUNDS.append(order)
    return f"refunded {amount:.2f} on {order}"


def make_agent(model: Model, db: Path) -> Agent:
    """The same agent definition in every process: the model, the tools, the store."""
    return Agent(model, tools=[refund], checkpointer=SQLiteCheckpointer(str(db)))


async def main(decision: str) -> None:
    # A scripted model cannot read the tool result, so its last answer is written for the
    # decision the human will make; a real model answers from the result it is sent.
    answer_text = (
        "Done: the refund is settled."
        if decision == "approve"
        else "I did not make the refund: it was refused (refunds need a receipt)."
    )
    model = ScriptedModel(
        [tool_call("refund", {"order": "A-17", "amount": 25.0}), text(answer_text)]
    )
    with tempfile.TemporaryDirectory() as scratch:
        db = Path(scratch) / "runs.db"

        # Process 1: the run suspends, waiting for a human; its state is in the database.
        first = await make_agent(model, db).run("Refund order A-17, 25 euros.")
        assert first.stop_reason is StopReason.SUSPENDED
        (call,) = first.pending
        print(f"run {first.run_id} waits for approval of {call.name}({call.arguments})")
        assert REFUNDS == []

        # Process 2, any time later: load the run by id and apply the human's decision.
        answer = True if decision == "approve" else Approval.deny("refunds need a receipt")
        done = await make_agent(model, db).resume(first.run_id, {call.id: answer})
        if not done.ok:  # done.error says why
            sys.exit(f"the run failed ({done.stop_reason}): {done.error}")
        print(f"{done.stop_reason}: {done.output}")
        print("tool result:", done.messages[-2].tool_results[0].content)
        print("refunds made:", REFUNDS)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "approve"))
