"""Fixtures of the query-layer tests: requests with known distributions and their oracle."""

from __future__ import annotations

import pyarrow as pa
import pytest
from known_data import Oracle, known_requests


@pytest.fixture(scope="module")
def requests_table() -> pa.Table:
    return known_requests()


@pytest.fixture(scope="module")
def oracle(requests_table) -> Oracle:
    return Oracle(requests_table)
