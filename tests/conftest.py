"""Shared test configuration: hypothesis profiles and the loopback-only network switch.

Profiles: ``dev`` (fast, the default), ``ci`` (thorough and derandomized; hypothesis loads it
by itself when ``CI=true``), ``fuzz`` (long). Choose one with ``--hypothesis-profile=NAME``.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

from conftest_network import no_external_network
from postgres_store import store

__all__ = ["no_external_network", "store"]

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


_OPT_IN = {
    "slow": "slow tests are opt-in: run pytest -m slow",
    "browser": "browser tests are opt-in: run pytest -m browser (needs /usr/bin/chromium)",
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``slow`` or ``browser`` are opt-in, as README.md says: they run when ``-m``
    names their marker."""
    chosen = config.getoption("markexpr") or ""
    for marker, reason in _OPT_IN.items():
        if marker in chosen:
            continue
        skip = pytest.mark.skip(reason=reason)
        for item in items:
            if item.get_closest_marker(marker) is not None:
                item.add_marker(skip)
