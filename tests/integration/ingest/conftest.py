"""The receiver, driven in process (:class:`asgi.Client`) or run as `llmwh serve`."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from asgi import Client
from senders import free_port, wait_for

from warehouse.config import Config
from warehouse.serve import build_app
from warehouse.store import open_store


@pytest.fixture
def client_for() -> Iterator:
    """``client_for(store, **options)``: a receiver on ``store`` with these options,
    without a write-ahead log unless they ask for one (``wal=True``): its tests read what
    a write stored as soon as it is acknowledged, which only committing first promises."""
    clients = []

    def make(store, **options) -> Client:
        client = Client(build_app(store, Config(**{"wal": False, **options})))
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.close()


@pytest.fixture
def make_client(migrated, client_for):
    """``make_client(**options)``: a receiver on the migrated store, with these options."""
    return lambda **options: client_for(migrated, **options)


@pytest.fixture
def client(make_client) -> Client:
    return make_client()


@pytest.fixture
def refusing_client(module_migrated, client_for) -> Client:
    """A receiver on a store shared by the module's tests whose writes are all refused:
    what they check is that nothing lands, which holds only while every one refuses."""
    return client_for(module_migrated)


@contextmanager
def serving(embedded_server, cwd) -> Iterator[tuple[str, str]]:
    """`llmwh serve` on the session's ClickHouse, in a database of its own:
    (its base URL, its store URL)."""
    url = embedded_server.store_url(f"prw_{uuid.uuid4().hex[:10]}")
    port = free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "warehouse",
            "serve",
            "--store",
            url,
            "--listen",
            f"127.0.0.1:{port}",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=cwd,
        env={k: v for k, v in os.environ.items() if not k.startswith("LLMWH_")},
    )
    try:
        wait_for(f"http://127.0.0.1:{port}/readyz")
        yield f"http://127.0.0.1:{port}", url
    finally:
        process.terminate()
        process.wait(timeout=30)
        store = open_store(url)
        store.command(f"DROP DATABASE IF EXISTS {store.database}")
        store.close()


@pytest.fixture
def receiver(embedded_server, tmp_path):
    """`llmwh serve` on the session's ClickHouse, in a database of its own."""
    with serving(embedded_server, tmp_path) as served:
        yield served


@pytest.fixture(scope="module")
def module_receiver(embedded_server, tmp_path_factory):
    """One `llmwh serve` for a module whose tests only add what the others never read."""
    with serving(embedded_server, tmp_path_factory.mktemp("serve")) as served:
        yield served
