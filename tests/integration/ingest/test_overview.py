"""The live overview page at GET / of the receiver, and GET /report: the SLA report's
sections drawn from the store it writes to, with the receiver's own health."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest

from warehouse.synthetic import Incident, synthetic_requests

END = datetime.now(UTC) - timedelta(minutes=2)
INCIDENT = Incident("zone-ttft", at=0.6, length=0.3)  # zone sh-b


def with_incident(client):
    """``client``'s store with 5 hours of traffic and the TTFT incident, ending now."""
    client.app.store.insert_arrow(
        "requests",
        synthetic_requests(
            20_000, seed=5, start=END - timedelta(hours=5), span=timedelta(hours=5),
            incidents=[INCIDENT],
        ),
    )  # fmt: skip
    return client


@pytest.fixture
def loaded(make_client):
    return with_incident(make_client(slos="chat-assistant"))


def test_the_overview_shows_health_and_the_slos_of_the_last_hours(loaded):
    response = loaded.get("/")
    assert response.status == 200, response.text
    assert response.headers["content-type"] == "text/html; charset=utf-8"
    page = response.text
    assert '<meta http-equiv="refresh" content="60">' in page
    assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d to \d{4}-\d\d-\d\d \d\d:\d\d \(UTC\)", page)
    assert "<h2>Receiver</h2>" in page and "writes/s" in page and "sealing lag" in page
    assert "<h2>chat-assistant</h2>" in page
    assert f"<td>{INCIDENT.target}</td>" in page  # the worst zone, named
    assert len(re.findall(r"<svg", page)) >= 3
    assert "<script" not in page and not re.search(r"""(?:src|href)=["']?https?:""", page)
    # The form opens the full report for a chosen range.
    assert "<form action='report' method='get'>" in page


def test_the_overview_opens_with_the_slos_in_trouble_first_and_each_has_a_page(make_client):
    """Every shipped SLO, the incident's TTFT burning the budget of some: the table
    comes before everything else, the first row is one that missed what it says, and
    it opens its page, whose headline names that. Which SLO that is, the traffic
    decides; the alerts' order is checked in tests/unit/test_report_headline.py."""
    client = with_incident(make_client())  # every shipped SLO
    page = client.get("/").text
    table = page.index("<table class='slos'>")
    assert table < page.index("<h2>Receiver</h2>") < page.index("<section")
    rows = re.findall(r"<tr><td><a href='slo/([^']+)'>", page)
    assert sorted(rows) == ["batch-summarization", "chat-assistant", "code-completion"]
    first = re.search(r"<tr><td><a href='slo/.*?</tr>", page, re.S)
    assert first is not None
    missed = re.search(r"<td class='what'><b class='missed'>([^<]+)</b>", first[0])
    assert missed is not None, first[0]  # over the whole range: the incident lasts 1.5 h
    slo = client.get(f"/slo/{rows[0]}")
    assert slo.status == 200, slo.text
    verdict = re.search(r'<p class="headline"><b class="missed">([^<]+)</b>', slo.text)
    assert verdict is not None and verdict[1] == f"Missed {missed[1]}.", slo.text[:3000]
    assert client.get("/slo/no-such-slo").status == 404


def test_the_report_page_takes_its_range_from_the_query(loaded):
    response = loaded.get("/report?slo=chat-assistant&since=5h&by=zone")
    assert response.status == 200, response.text
    assert "<h2>chat-assistant</h2>" in response.text
    assert f"<td>{INCIDENT.target}</td>" in response.text


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("slo=no-such-slo", "unknown SLO no-such-slo"),
        ("slo=chat-assistant&since=yesterday", "yesterday"),
        ("slo=chat-assistant&by=no_such_dimension", "no_such_dimension"),
        ("slo=chat-assistant&since=99999999d", "99999999d"),
        ("slo=chat-assistant&since=1h&until=2h", "not before until"),
    ],
)
def test_a_bad_report_request_is_a_one_line_400(loaded, query, message):
    response = loaded.get(f"/report?{query}")
    assert response.status == 400
    assert response.text.startswith("llmwh: error:") and message in response.text
    assert response.text.count("\n") == 1


def test_a_store_without_requests_says_so(client):
    response = client.get("/")
    assert response.status == 200
    assert "No request in this range" in response.text


def test_the_pages_need_the_receivers_credentials(make_client):
    client = make_client(auth_token="s3cret", slos="chat-assistant")
    assert client.get("/").status == 401
    assert client.get("/report").status == 401
    assert client.get("/", authorization="Bearer s3cret").status == 200


def test_in_multi_tenant_mode_the_pages_show_the_headers_tenant_only(make_client):
    client = make_client(tenant_header="X-Scope-OrgID", slos="chat-assistant")
    client.app.store.insert_arrow(
        "requests", synthetic_requests(6_000, seed=5, start=END - timedelta(hours=2),
                                       span=timedelta(hours=2)),
    )  # fmt: skip
    assert client.get("/").status == 400  # no header: no tenant to show
    for tenant in ("acme", "globex"):
        page = client.get("/report?slo=chat-assistant&since=3h&by=tenant", x_scope_orgid=tenant)
        assert page.status == 200, page.text
        shown = set(re.findall(r"<tr><td>([a-z]+)</td><td>[\d.,]+k? req</td>", page.text))
        assert shown <= {tenant}  # never another tenant's group
        assert shown or tenant != "acme"  # acme calls the chat service
        # A dimension named like the tenant column reads the header's tenant still.
        attrs = client.get(
            "/report?slo=chat-assistant&since=3h&by=attrs['tenant']", x_scope_orgid=tenant
        )
        assert attrs.status == 200, attrs.text
        overview = client.get("/", x_scope_orgid=tenant)
        assert overview.status == 200
        # Its own figures, never the receiver's (every tenant's writes).
        assert f"<h2>Tenant {tenant}</h2>" in overview.text
        assert "<h2>Receiver</h2>" not in overview.text
