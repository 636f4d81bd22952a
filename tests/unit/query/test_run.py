"""Running compiled questions: independent ones at once where the store allows it."""

from __future__ import annotations

import threading

import pyarrow as pa
import pytest

from warehouse.query.builder import Compiled, Plan
from warehouse.query.run import execute_all
from warehouse.store.clickhouse import IN_PROCESS, SERVER


class BarrierStore:
    """A store whose queries each wait until ``parties`` of them are running at once."""

    database = "db"

    def __init__(self, capabilities, parties: int, timeout: float = 5.0):
        self.capabilities = capabilities
        self.barrier = threading.Barrier(parties, timeout=timeout)

    def query_arrow(self, sql, parameters=None, settings=None) -> pa.Table:
        self.barrier.wait()  # raises BrokenBarrierError when the others never come
        return pa.table({"n": [int(sql.removeprefix("SELECT "))]})


def questions(count: int) -> list[Compiled]:
    plan = Plan("requests", "raw rows", "none")
    return [Compiled(f"SELECT {n}", {}, plan, ("n",)) for n in range(count)]


def test_questions_run_at_once_on_a_store_that_takes_concurrent_queries():
    store = BarrierStore(SERVER, parties=3)
    answers = execute_all(store, questions(3))
    assert [a["n"].to_list() for a in answers] == [[0], [1], [2]]  # in the order asked


def test_questions_run_one_after_another_elsewhere():
    store = BarrierStore(IN_PROCESS, parties=1)
    answers = execute_all(store, questions(3))
    assert [a["n"].to_list() for a in answers] == [[0], [1], [2]]
    assert not IN_PROCESS.concurrent_reads and SERVER.concurrent_reads


def test_a_failing_question_fails_the_whole_run():
    store = BarrierStore(SERVER, parties=3, timeout=0.5)
    with pytest.raises(threading.BrokenBarrierError):
        execute_all(store, questions(2))  # two of the three the barrier waits for
