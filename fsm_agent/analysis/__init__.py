"""What the machine guarantees, worked out from its table and a policy, without running it.

Read in order: :mod:`~fsm_agent.analysis.bounds` (the worst case a policy allows, in closed
form), :mod:`~fsm_agent.analysis.formulas` (the same budgets as printed formulas),
:mod:`~fsm_agent.analysis.checker` (the exhaustive model checker that proves them per policy)
and :mod:`~fsm_agent.analysis.proof` (the parametric proof that the table terminates for every
policy). Everything here reads :mod:`fsm_agent.machine` and calls its pure ``decide``; nothing
does I/O. The modules' old paths under ``fsm_agent.machine`` still import them.
"""
