"""`llmwh sql` as a tenant: the rewrite that scopes every table, and what it refuses.

Each refused query is one that would otherwise read another tenant's rows or a table
without tenants (found by review: CTE names hiding real tables, ``IN table``).
"""

from __future__ import annotations

import pytest

from warehouse.errors import QueryError
from warehouse.query import dialects
from warehouse.query.readonly import check_read_only, scope_to_tenant

SCOPED = "(SELECT * FROM requests WHERE tenant = {llmwh_tenant: String}) AS requests"


def scoped(sql: str) -> str:
    return dialects.render(scope_to_tenant(check_read_only(sql), "llmwh"), "clickhouse")


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT count() FROM requests",
        "SELECT * FROM requests WHERE request_id IN (SELECT request_id FROM requests)",
        "WITH t AS (SELECT tenant FROM requests) SELECT DISTINCT tenant FROM t",
        "WITH 1 AS requests SELECT * FROM requests",  # a scalar WITH name is no table
    ],
)
def test_every_read_of_requests_is_the_tenants_rows(sql):
    rendered = scoped(sql)
    assert SCOPED in rendered
    unscoped = rendered.replace(SCOPED, "").replace("FROM requests WHERE tenant", "")
    assert "FROM requests" not in unscoped, rendered


def test_a_cte_named_like_a_table_reads_the_tenants_rows_in_its_body():
    assert scoped("WITH requests AS (SELECT * FROM requests) SELECT * FROM requests") == (
        f"WITH requests AS (SELECT * FROM {SCOPED}) SELECT * FROM requests"
    )


def test_final_stays_with_the_table():
    assert scoped("SELECT * FROM requests_1m AS r FINAL") == (
        "SELECT * FROM (SELECT * FROM requests_1m FINAL WHERE tenant = {llmwh_tenant: String}) AS r"
    )


@pytest.mark.parametrize(
    ("sql", "refusal"),
    [
        ("WITH 1 AS samples SELECT * FROM samples", "samples is not tenant-scoped"),
        (
            "SELECT * FROM series JOIN (WITH series AS (SELECT 1 a) SELECT a FROM series) q "
            "USING a",
            "series is not tenant-scoped",
        ),
        ("SELECT 1 FROM requests WHERE tenant IN series", "IN <table> is refused"),
        ("SELECT 1 FROM requests WHERE 1 GLOBAL IN system.one", "IN <table> is refused"),
        ("SELECT 1 FROM requests WHERE 1 IN {t:Identifier}", "IN <table> is refused"),
        ("SELECT * FROM requests SAMPLE 0.1", "SAMPLE is refused"),
        ("SELECT file('/etc/passwd')", r"file\(\) is refused"),
        ("SELECT URL('http://x')", r"URL\(\) is refused"),
        ("SELECT dictGetString('d', 'a', 1)", r"dictGetString\(\) is refused"),
        ("SELECT * FROM numbers(3)", "table functions are refused"),
        ("SELECT * FROM other.requests", "other.requests is not tenant-scoped"),
    ],
)
def test_what_could_read_past_the_tenant_is_refused(sql, refusal):
    with pytest.raises(QueryError, match=refusal):
        scoped(sql)
