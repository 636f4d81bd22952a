"""`llmwh sql` as a tenant, the second wall: the rewrite that scopes every table, and
what it refuses before the query reaches ClickHouse's row policies (which hold the
boundary: tests/integration/security).

Each refused query is one that would otherwise read another tenant's rows or a table
without tenants (found by review and by an adversarial pass: CTE names hiding real
tables, ``IN table`` and its function forms).
"""

from __future__ import annotations

import pytest

from warehouse import dialects
from warehouse.errors import QueryError
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
    ],
)
def test_every_read_of_requests_is_the_tenants_rows(sql):
    rendered = scoped(sql)
    assert SCOPED in rendered
    unscoped = rendered.replace(SCOPED, "").replace("FROM requests WHERE tenant", "")
    assert "FROM requests" not in unscoped, rendered


def test_the_series_tables_are_left_to_their_row_policies():
    assert scoped("SELECT count() FROM samples") == "SELECT count() FROM samples"


def test_the_series_samples_view_is_its_tenants_rows_too():
    # Its row policies are its tables' (ClickHouse reads them as the tenant); the view
    # has a tenant column, so the second wall scopes it as it scopes requests.
    assert scoped("SELECT count() FROM series_samples AS s WHERE s.value > 1") == (
        "SELECT count() FROM (SELECT * FROM series_samples "
        "WHERE tenant = {llmwh_tenant: String}) AS s WHERE s.value > 1"
    )
    with pytest.raises(QueryError, match="WITH may not name series_samples"):
        scoped("WITH (SELECT 1) AS series_samples SELECT * FROM series_samples")


def test_final_stays_with_the_table():
    assert scoped("SELECT * FROM requests_1m AS r FINAL") == (
        "SELECT * FROM (SELECT * FROM requests_1m FINAL WHERE tenant = {llmwh_tenant: String}) AS r"
    )


@pytest.mark.parametrize(
    ("sql", "refusal"),
    [
        # ClickHouse reads a scalar WITH name as a scalar and FROM <name> as the table.
        ("WITH 1 AS requests SELECT * FROM requests", "WITH may not name requests"),
        (
            "WITH (SELECT 1) AS requests SELECT tenant FROM requests WHERE tenant = 'b'",
            "WITH may not name requests",
        ),
        ("WITH requests AS (SELECT * FROM requests) SELECT 1", "WITH may not name requests"),
        ("WITH 1 AS samples SELECT * FROM samples", "WITH may not name samples"),
        (
            "SELECT * FROM series JOIN (WITH series AS (SELECT 1 a) SELECT a FROM series) q "
            "USING a",
            "WITH may not name series",
        ),
        ("SELECT 1 FROM requests WHERE globalIn(model, series)", r"globalIn\(\) is refused"),
        ("SELECT 1 FROM requests WHERE notIn(model, series)", r"notIn\(\) is refused"),
        ("SELECT 1 FROM requests WHERE nullIn(model, series)", r"nullIn\(\) is refused"),
        (
            "SELECT 1 FROM requests WHERE globalNotIn(model, metric_metadata)",
            r"globalNotIn\(\) is refused",
        ),
        ("SELECT * FROM metric_metadata", "metric_metadata is not tenant-scoped"),
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
