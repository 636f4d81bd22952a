"""Grafana's provisioning files for the dashboards: the datasource and the provider.

Their uid, database and port are the code's, so the dashboards (which name the
datasource by uid) and the embedded server they point at cannot drift from them.
"""

from __future__ import annotations

from warehouse.exporters.grafana_dashboards import DATASOURCE
from warehouse.store import DEFAULT_DATABASE
from warehouse.store.embedded import DEFAULT_HTTP_PORT

__all__ = ["DASHBOARDS_PATH", "render"]

DASHBOARDS_PATH = "/var/lib/grafana/dashboards/llmwh"
"""Where the provider reads the dashboards' JSON files (docs/exporters.md copies them there)."""


def datasource() -> str:
    """The datasource for the warehouse's ClickHouse, set for the embedded server."""
    kind, uid = DATASOURCE["type"], DATASOURCE["uid"]
    port, database = DEFAULT_HTTP_PORT, DEFAULT_DATABASE
    return f"""\
# Grafana datasource for the warehouse's ClickHouse, for the {kind}
# plugin (grafana-cli plugins install {kind}).
# Copy to /etc/grafana/provisioning/datasources/. The dashboards in ../../dashboards
# refer to this datasource by its uid, `{uid}`: keep it.
#
# Defaults match the embedded server (`llmwh clickhouse start` / `llmwh serve`): HTTP on
# 127.0.0.1:{port}, no authentication, database {database}. The dashboards' SQL names tables
# without a database, so `defaultDatabase` picks it.
# For a real ClickHouse, set host, port, protocol (native: 9000, TLS 9440), secure,
# username, and a password under secureJsonData; give the user readonly=1.
apiVersion: 1

datasources:
  - name: llmwh ClickHouse
    uid: {uid}
    type: {kind}
    editable: true
    jsonData:
      host: 127.0.0.1
      port: {port}
      protocol: http
      secure: false
      username: default
      defaultDatabase: {database}
      dialTimeout: 10
      queryTimeout: 60
    # secureJsonData:
    #   password: ...
"""


def dashboard_provider() -> str:
    """The file provider that loads the dashboards into a folder of their own."""
    return f"""\
# Grafana dashboard provider for the llmwh dashboards.
# Copy to /etc/grafana/provisioning/dashboards/ and the JSON files of
# exporters/grafana/dashboards/ to the `path` below (or mount that directory there).
apiVersion: 1

providers:
  - name: llmwh
    orgId: 1
    folder: LLM SLA warehouse
    type: file
    disableDeletion: false
    allowUiUpdates: true
    updateIntervalSeconds: 30
    options:
      path: {DASHBOARDS_PATH}
      foldersFromFilesStructure: false
"""


def render() -> dict[str, str]:
    """Path under ``grafana/provisioning/`` -> text of each provisioning file."""
    return {
        "datasources/llmwh-clickhouse.yaml": datasource(),
        "dashboards/llmwh.yaml": dashboard_provider(),
    }
