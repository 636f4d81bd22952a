"""Shared fixtures: the real embedded ClickHouse server, and one fresh store per backend.

Every test that takes ``store`` runs three times: on the embedded server over HTTP, on
ClickHouse in-process (chdb) and on DuckDB, each in a database of its own.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from stores import (
    BACKENDS,
    POLICED_DATABASES,
    TENANCY_DATABASE,
    MigratedPool,
    fresh_store,
    store_url,
)

from warehouse.store import DEFAULT_DATABASE, Store
from warehouse.store.embedded import ServerInfo, start_server, stop_server
from warehouse.store.migrations import Migrator


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: a worker per core and one more. Much of the suite waits on real
    processes (kill -9 and restarts, Prometheus and vmagent loads, sealing refreshes),
    and a worker waiting leaves its core idle: on 2 cores the whole suite took 694 s with
    2 workers, 610 s with 3 and 605 s with 4 (docs/development.md)."""
    if "PYTEST_XDIST_AUTO_NUM_WORKERS" in os.environ:  # xdist's own override still wins
        return int(os.environ["PYTEST_XDIST_AUTO_NUM_WORKERS"])
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return (cores or 1) + 1


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Modules with a slow test first, the rest as collected: `make test` hands whole
    modules to its workers (pytest-xdist's ``--dist loadscope``), so the longest start
    first and the workers finish together."""
    slow = {item.nodeid.split("::")[0] for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.nodeid.split("::")[0] not in slow)


@pytest.fixture(scope="session")
def embedded_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerInfo]:
    """One real ClickHouse server (chdb-core's, as `llmwh serve` runs it) for the session.

    The tables of :data:`TENANCY_DATABASE` and of the stores the fixtures open on it
    carry the row policies tenants read under (the server fixes them at start:
    tests/integration/security)."""
    info = start_server(
        tmp_path_factory.mktemp("embedded"),
        http_port=0,
        tcp_port=0,
        tenant_databases=(DEFAULT_DATABASE, TENANCY_DATABASE, *POLICED_DATABASES),
    )
    yield info
    stop_server(info.data_dir)


@pytest.fixture(scope="session")
def chdb_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """chdb holds one data directory per process: every in-process store shares it."""
    return tmp_path_factory.mktemp("chdb")


@pytest.fixture(scope="session")
def migrated_pool() -> MigratedPool:
    return MigratedPool()


@pytest.fixture(params=BACKENDS)
def store(
    request: pytest.FixtureRequest,
    embedded_server: ServerInfo,
    chdb_path: Path,
    tmp_path: Path,
    migrated_pool: MigratedPool,
) -> Iterator[Store]:
    """An empty store (no database yet) on each backend; for a test that takes
    ``migrated``, a migrated one with no rows, from the pool on ClickHouse."""
    url = store_url(request.param, embedded_server, chdb_path, tmp_path)
    if "migrated" in request.fixturenames and request.param != "duckdb":
        with migrated_pool.take(url) as opened:
            yield opened
    else:
        with fresh_store(url) as opened:
            yield opened


@pytest.fixture
def migrated(store: Store) -> Store:
    """A store with every migration applied, with the default settings, and no rows.

    Not to be overridden: ``store`` hands a test that takes ``migrated`` a database
    migrated already. A module that migrates with other settings names its fixture
    otherwise and migrates ``store`` itself."""
    Migrator(store).up()
    return store


@pytest.fixture(scope="module", params=BACKENDS)
def module_migrated(
    request: pytest.FixtureRequest,
    embedded_server: ServerInfo,
    chdb_path: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Store]:
    """One migrated store per backend shared by a module's tests, for tests that only read
    what a module fixture wrote once (a migration costs about a second on ClickHouse)."""
    url = store_url(request.param, embedded_server, chdb_path, tmp_path_factory.mktemp("shared"))
    with fresh_store(url) as opened:
        Migrator(opened).up()
        yield opened
