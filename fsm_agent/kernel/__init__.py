"""The kernel: the public :class:`Agent`, the driver that walks the machine, and the states'
handlers that do the work.

Read in order: :mod:`~fsm_agent.kernel.agent` (what a user builds and calls),
:mod:`~fsm_agent.kernel.run` (a run's result, handle and runtime),
:mod:`~fsm_agent.kernel.context` (what a run carries while it moves), the driver, and
:mod:`~fsm_agent.kernel.states` (one handler per state: the only place where effects happen).
"""
