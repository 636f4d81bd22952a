"""A local sharded ClickHouse cluster for development: N embedded servers, one per shard.

Each shard is an embedded server (:mod:`warehouse.store.embedded`) in ``DIR/shard-K``,
and every one carries the same ``<remote_servers>`` section naming all shards by their
native TCP ports, so a ``Distributed(<cluster>, db, table, key)`` table on any of them
spreads inserts over the shards and answers queries from all. ``DIR/cluster.json``
records the cluster's name and shards. One replica per shard: Replicated engines and
``ON CLUSTER`` need ClickHouse Keeper, which does not run here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape

from warehouse.errors import ConfigError, ServerAlreadyRunning
from warehouse.store import embedded
from warehouse.store._embedded_child import HOST
from warehouse.store.url import DEFAULT_DATABASE

__all__ = [
    "LocalCluster",
    "cluster_status",
    "remote_servers_xml",
    "shard_states",
    "start_cluster",
    "start_shard",
    "stop_cluster",
]

DEFAULT_CLUSTER = "llmwh"


@dataclass(frozen=True)
class LocalCluster:
    """A running local cluster: its name and each shard's server, shard 1 first."""

    name: str
    shards: tuple[embedded.ServerInfo, ...]

    def store_urls(self, database: str = DEFAULT_DATABASE) -> list[str]:
        """Each shard's own store URL (its local node alone)."""
        return [shard.store_url(database) for shard in self.shards]

    def store_url(self, database: str = DEFAULT_DATABASE) -> str:
        """The warehouse's store URL on the cluster: shard 1 as the entry node, the
        cluster's name, and every shard (for migrations)."""
        shards = ",".join(f"{HOST}:{shard.http_port}" for shard in self.shards)
        return f"{self.shards[0].store_url(database)}?cluster={self.name}&shards={shards}"


def remote_servers_xml(cluster: str, tcp_ports: list[int]) -> str:
    """The ``<remote_servers>`` section naming one local replica per shard."""
    shards = "".join(
        f"      <shard><replica><host>{HOST}</host><port>{port}</port></replica></shard>\n"
        for port in tcp_ports
    )
    return (
        f"  <remote_servers>\n    <{escape(cluster)}>\n{shards}    </{escape(cluster)}>\n"
        "  </remote_servers>\n"
    )


def start_cluster(
    data_dir: str | Path,
    shards: int,
    cluster: str = DEFAULT_CLUSTER,
    http_port: int = 0,
    tcp_port: int = 0,
) -> LocalCluster:
    """Start ``shards`` embedded servers under ``data_dir`` as cluster ``cluster``.

    Shard K takes ``http_port + K - 1`` and ``tcp_port + K - 1``; 0 picks free ports.
    Every shard started is stopped again if one fails to start.
    """
    if shards < 1:
        raise ConfigError(f"--shards must be at least 1, got {shards}")
    if not cluster.replace("_", "").isalnum():
        raise ConfigError(f"cluster name {cluster!r}: use letters, digits and _ only")
    root = Path(data_dir).resolve()
    if cluster_status(root) is not None:
        raise ServerAlreadyRunning(
            f"a local cluster already runs on {root}; stop it with `llmwh clickhouse stop`"
        )
    ports = embedded.claim_ports(
        *((http_port + k if http_port else 0, "--http-port") for k in range(shards)),
        *((tcp_port + k if tcp_port else 0, "--tcp-port") for k in range(shards)),
    )
    http_ports, tcp_ports = ports[:shards], ports[shards:]
    extra = remote_servers_xml(cluster, tcp_ports)
    started: list[embedded.ServerInfo] = []
    try:
        for k in range(shards):
            started.append(
                embedded.start_server(
                    root / f"shard-{k + 1}", http_ports[k], tcp_ports[k], extra_config=extra
                )
            )
    except BaseException:
        for info in started:
            embedded.stop_server(info.data_dir)
        raise
    shards_recorded = [
        {"dir": info.data_dir, "http_port": info.http_port, "tcp_port": info.tcp_port}
        for info in started
    ]
    (root / "cluster.json").write_text(
        json.dumps({"cluster": cluster, "shards": shards_recorded}) + "\n"
    )
    return LocalCluster(cluster, tuple(started))


def start_shard(data_dir: str | Path, shard: int) -> embedded.ServerInfo:
    """Start shard ``shard`` (1-based) of the cluster on ``data_dir`` again, on its ports."""
    name, shards = _manifest(data_dir)
    if not 1 <= shard <= len(shards):
        raise ConfigError(f"the cluster on {data_dir} has no shard {shard}")
    extra = remote_servers_xml(name, [s["tcp_port"] for s in shards])
    recorded = shards[shard - 1]
    return embedded.start_server(
        recorded["dir"], recorded["http_port"], recorded["tcp_port"], extra_config=extra
    )


def _manifest(data_dir: str | Path) -> tuple[str, list[dict[str, Any]]]:
    manifest = Path(data_dir).resolve() / "cluster.json"
    if not manifest.exists():
        return "", []
    recorded = json.loads(manifest.read_text())
    return recorded["cluster"], recorded["shards"]


def shard_states(data_dir: str | Path) -> tuple[str, list[tuple[str, embedded.ServerInfo | None]]]:
    """The cluster recorded on ``data_dir``: its name, and each shard's directory and
    server (None where it does not run). ``("", [])`` when there is none."""
    name, shards = _manifest(data_dir)
    return name, [(s["dir"], embedded.server_status(s["dir"])) for s in shards]


def cluster_status(data_dir: str | Path) -> LocalCluster | None:
    """The local cluster on ``data_dir`` when every one of its shards runs, else None."""
    name, states = shard_states(data_dir)
    if not states or any(info is None for _, info in states):
        return None
    return LocalCluster(name, tuple(info for _, info in states if info is not None))


def stop_cluster(data_dir: str | Path) -> list[embedded.ServerInfo]:
    """Stop every shard of the local cluster on ``data_dir``; returns those that ran."""
    stopped = []
    for recorded in _manifest(data_dir)[1]:
        info = embedded.stop_server(recorded["dir"])
        if info is not None:
            stopped.append(info)
    return stopped
