"""Shared test configuration: hypothesis profiles and the loopback-only network switch.

The checkpoint stores, one fixture per meaning (each name is defined once in the suite):
``sqlite_store`` (one SQLite file), ``pg_store`` (one PostgreSQL schema), ``local_store`` (in
memory, then SQLite: the stores that need no server), ``db_store`` (SQLite, then PostgreSQL: the
stores on a database) and ``any_store`` (all three). A PostgreSQL case is marked ``postgres``
and skips, saying why, when no server answers.

Profiles: ``dev`` (fast, the default), ``ci`` (derandomized, 100 examples; hypothesis loads it
by itself when ``CI=true``), ``fuzz`` (long). Choose one with ``--hypothesis-profile=NAME``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import HealthCheck, settings

from conftest_network import no_external_network
from docs_blocks import ROOT, build_site
from postgres_store import postgres_checkpointer

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from fsm_agent.analysis.checker import CheckReport
    from fsm_agent.persistence import (
        Checkpointer,
        InMemoryCheckpointer,
        PostgresCheckpointer,
        SQLiteCheckpointer,
    )

__all__ = [
    "MARKERS",
    "Marker",
    "any_store",
    "browser",
    "db_store",
    "default_check",
    "docs_site",
    "exporter",
    "local_store",
    "no_external_network",
    "pg_store",
    "sqlite_store",
]

# The driver asserts that every outcome a handler reports is declared for its state.
os.environ.setdefault("FSM_AGENT_CHECK_DECLARATIONS", "1")

settings.register_profile(
    "dev", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
# ci: hypothesis's own example count, derandomized. 250 cost the default run about 20 s of CPU
# (most of it in the checker's generated-policy proof) for examples that repeat every run; the
# long search is the fuzz profile's.
settings.register_profile("ci", settings.get_profile("ci"), max_examples=100)
settings.register_profile(
    "fuzz", max_examples=20_000, deadline=None, suppress_health_check=list(HealthCheck)
)
# Under CI=true hypothesis has already chosen its "ci" profile: reload it so the example count
# above applies; anywhere else start from "dev" (``--hypothesis-profile`` still overrides).
settings.load_profile("ci" if os.environ.get("CI") else "dev")


@dataclass(frozen=True)
class Marker:
    """A marker of the suite: what it says of a test, and how to run it when it is opt-in."""

    description: str
    opt_in: str | None = None
    """The skip message of an opt-in marker (``None``: the test runs by default)."""


# Every marker of the suite, in one list (``--strict-markers`` accepts no other). An opt-in
# marker's tests are skipped unless ``-m`` names it; its message says how to run them.
MARKERS = {
    "slow": Marker(
        "slow by design: long fuzzing, soak, proof or build runs (README.md lists them)",
        "slow tests are opt-in: run pytest -m slow",
    ),
    "e2e": Marker(
        "drives a real local inference server",
        "e2e tests are opt-in: run pytest -m e2e (pip install -r benchmarks/requirements-e2e.txt)",
    ),
    "browser": Marker(
        "drives a headless Chromium (/usr/bin/chromium) against the inspector",
        "browser tests are opt-in: run pytest -m browser (needs /usr/bin/chromium)",
    ),
    "postgres": Marker(
        "needs a PostgreSQL server (FSM_AGENT_PG_DSN, default "
        "postgresql://postgres@127.0.0.1:5432/test); skips, saying why, when none answers"
    ),
}


def pytest_configure(config: pytest.Config) -> None:
    """Register :data:`MARKERS`."""
    for name, marker in MARKERS.items():
        how = f"; opt in with -m {name}" if marker.opt_in else ""
        config.addinivalue_line("markers", f"{name}: {marker.description}{how}")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests with an opt-in marker run only when ``-m`` names their marker, as README.md says."""
    chosen = config.getoption("markexpr") or ""
    for name, marker in MARKERS.items():
        if marker.opt_in is None or name in chosen:
            continue
        skip = pytest.mark.skip(reason=marker.opt_in)
        for item in items:
            if item.get_closest_marker(name) is not None:
                item.add_marker(skip)


def _open(kind: str, tmp_path: Path) -> Iterator[Checkpointer]:
    """A fresh store of ``kind`` (``memory``, ``sqlite`` or ``postgres``), closed afterwards."""
    from fsm_agent.persistence import InMemoryCheckpointer, SQLiteCheckpointer

    if kind == "memory":
        yield InMemoryCheckpointer()
    elif kind == "sqlite":
        opened = SQLiteCheckpointer(tmp_path / "runs.db")
        yield opened
        opened.close()
    else:
        with postgres_checkpointer() as schema_store:
            yield schema_store


_POSTGRES = pytest.param("postgres", marks=pytest.mark.postgres)


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Iterator[SQLiteCheckpointer]:
    """An empty SQLite store in a fresh file, closed after the test."""
    from fsm_agent.persistence import SQLiteCheckpointer

    opened = SQLiteCheckpointer(tmp_path / "runs.db")
    yield opened
    opened.close()


@pytest.fixture
def pg_store() -> Iterator[PostgresCheckpointer]:
    """A PostgreSQL store in a fresh schema, dropped after the test."""
    with postgres_checkpointer() as schema_store:
        yield schema_store


@pytest.fixture(params=["memory", "sqlite"])
def local_store(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[InMemoryCheckpointer | SQLiteCheckpointer]:
    """Each store that needs no server: in memory, then a fresh SQLite file."""
    yield from _open(request.param, tmp_path)  # type: ignore[misc]


@pytest.fixture(params=["sqlite", _POSTGRES])
def db_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Checkpointer]:
    """Each store on a database: a fresh SQLite file, then a fresh schema on PostgreSQL."""
    yield from _open(request.param, tmp_path)


@pytest.fixture(params=["memory", "sqlite", _POSTGRES])
def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Checkpointer]:
    """Each kind of store: in memory, a fresh SQLite file, a fresh schema on PostgreSQL."""
    yield from _open(request.param, tmp_path)


@pytest.fixture(scope="session")
def default_check() -> CheckReport:
    """The checker's report on the default policy: its search takes seconds, so it is made once
    for the session (the report is frozen)."""
    from fsm_agent.analysis.checker import check

    return check()


@pytest.fixture(scope="session")
def docs_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The docs site, built once for the session's checks; the build must pass the check."""
    pytest.importorskip("mkdocs", reason="the docs extra is not installed")
    site = tmp_path_factory.mktemp("site")
    assert build_site(ROOT, site) == []
    return site


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One headless Chromium for the module."""
    playwright_api = pytest.importorskip("playwright.sync_api")
    from inspector_server import CHROMIUM, CHROMIUM_ARGS

    if not os.path.exists(CHROMIUM):
        pytest.skip(f"no Chromium at {CHROMIUM}: apt-get install -y chromium")
    with playwright_api.sync_playwright() as driver:
        launched = driver.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield launched
        launched.close()


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    """An OpenTelemetry exporter that keeps the finished spans in memory."""
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    yield exporter
    exporter.clear()
