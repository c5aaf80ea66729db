"""Record a run, and replay it deterministically with no network: how an incident becomes a test.

Read in order: :mod:`~fsm_agent.replay.recording` (a recording written and read, and a run
replayed from it), :mod:`~fsm_agent.replay.children` (the runs an agent tool ran, recorded
inside their parent's events and replayed too) and :mod:`~fsm_agent.replay.divergence` (a replay
compared with its recording: the first difference). This package re-exports the public names
of :mod:`~fsm_agent.replay.recording`.
"""

from . import recording
from .recording import *  # noqa: F403  (the names of recording.__all__, written once there)

__all__ = recording.__all__
