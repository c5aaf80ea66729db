"""``python -m fsm_agent``: the ``fsm-agent`` command line."""

from fsm_agent.cli import main

raise SystemExit(main())
