"""What a run is, and what is said about it.

Read in order: :mod:`~fsm_agent.run.state` (the run's one serialisable state, its position in
the machine included), :mod:`~fsm_agent.run.events` (what a listener hears),
:mod:`~fsm_agent.run.approval` (a tool call allowed, denied or asked of a human; the resume
handle) and :mod:`~fsm_agent.run.output` (a typed answer and its validation). Each module's old
path (``fsm_agent.run_state``, ``fsm_agent.events``, ...) still imports it.
"""
