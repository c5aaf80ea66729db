"""The kernel: the public :class:`~fsm_agent.kernel.agent.Agent`, the driver that walks the
machine, and the states' handlers that do the work.

Read in order: :mod:`~fsm_agent.kernel.agent` (what a user builds and calls),
:mod:`~fsm_agent.kernel.run` (a run's result, handle and runtime),
:mod:`~fsm_agent.kernel.plan` (what a run reads of its agent, compiled once),
:mod:`~fsm_agent.kernel.context` (what a run carries while it moves: interrupts, effects,
emitted events), :mod:`~fsm_agent.kernel.driver` (each move in four layers: next outcome,
decide, apply, publish; and the finalisation step that always runs),
:mod:`~fsm_agent.kernel.states` (one module per state: the only place where effects happen),
then the helpers :mod:`~fsm_agent.kernel.listening` (a streamed run's events handed out as
they happen), :mod:`~fsm_agent.kernel.phasing` (the agent's phases at run time),
:mod:`~fsm_agent.kernel.limits` (usage limits) and
:mod:`~fsm_agent.kernel.checks` (the checks of user code made when an agent is built).
"""
