"""Shared test configuration: hypothesis profiles and the loopback-only network switch.

Profiles: ``dev`` (fast, the default), ``ci`` (thorough and derandomized; hypothesis loads it
by itself when ``CI=true``), ``fuzz`` (long). Choose one with ``--hypothesis-profile=NAME``.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

from conftest_network import no_external_network

__all__ = ["no_external_network"]

# The driver asserts that every outcome a handler reports is declared for its state.
os.environ.setdefault("FSM_AGENT_CHECK_DECLARATIONS", "1")

settings.register_profile(
    "dev", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("ci", settings.get_profile("ci"), max_examples=250)
settings.register_profile(
    "fuzz", max_examples=20_000, deadline=None, suppress_health_check=list(HealthCheck)
)
# Under CI=true hypothesis has already chosen its "ci" profile: reload it so the example count
# above applies; anywhere else start from "dev" (``--hypothesis-profile`` still overrides).
settings.load_profile("ci" if os.environ.get("CI") else "dev")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``slow`` are opt-in, as README.md says: they run when ``-m`` names them."""
    if "slow" in (config.getoption("markexpr") or ""):
        return
    skip = pytest.mark.skip(reason="slow tests are opt-in: run pytest -m slow")
    for item in items:
        if item.get_closest_marker("slow") is not None:
            item.add_marker(skip)
