"""The values a model reads and answers: cheap records, validated at the edges.

Read in order: :mod:`~fsm_agent.values.record` (the base of the value types),
:mod:`~fsm_agent.values.define` (how they are defined: one compiled method each),
:mod:`~fsm_agent.values.deep_json` (arguments nested too deep for ``json``, written without
recursion), :mod:`~fsm_agent.values.messages` (messages, tool calls and results, usage) and
:mod:`~fsm_agent.values.model_settings` (the settings of a model call). Each module's old path
(``fsm_agent.messages``, ...) still imports it.
"""
