"""What can happen, and the pure decision of what does.

Read in order: :mod:`~fsm_agent.machine.guards` (the counters, the limits, and each guard's
function with what it compares), :mod:`~fsm_agent.machine.table` (the states, outcomes and stop
reasons, each state's declared outcomes and interrupts, and the rows),
:mod:`~fsm_agent.machine.agent_machine` (the table validated and compiled; ``decide``).
What the table guarantees (bounds, the checker, the proof) is worked out above it, in
:mod:`fsm_agent.analysis`. Nothing here does I/O: the kernel, the checker and the fuzzer all call
the same ``decide``.
"""

from .agent_machine import AgentMachine, IllegalMoveError, Move, decide, default_machine

__all__ = ["AgentMachine", "IllegalMoveError", "Move", "decide", "default_machine"]
