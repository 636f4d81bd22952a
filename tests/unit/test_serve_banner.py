"""The banner ``llmwh serve`` prints: every way in, at a path the receiver serves."""

from __future__ import annotations

import asyncio
import re

from warehouse.config import Config
from warehouse.ingest.app import Receiver
from warehouse.serve.banner import banner
from warehouse.serve.reads import READ_PATH
from warehouse.store import open_store

BASE = "http://127.0.0.1:9201"


def _banner(config: Config, *, demo: bool = False) -> str:
    return banner("duckdb:///w.duckdb", config, "127.0.0.1", 9201, demo=demo, program="llmwh")


def _allowed(receiver: Receiver, path: str) -> str:
    """The methods the receiver serves at ``path``, from its 405 to a DELETE ('' on 404)."""
    sent: list[dict[str, object]] = []

    async def receive() -> dict[str, object]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, object]) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "DELETE", "path": path, "headers": []}
    asyncio.run(receiver(scope, receive, send))
    headers = dict(sent[0].get("headers", []))  # type: ignore[arg-type]
    return headers.get(b"allow", b"").decode()


def test_every_write_path_in_the_banner_takes_posts_at_the_receiver(tmp_path):
    text = _banner(Config())
    lines = {line.split(":", 1)[0].strip(): line for line in text.splitlines()}
    for way in ("remote write", "events", "OTLP/HTTP"):
        assert way in lines, f"the banner has no line for {way}:\n{text}"
    paths = re.findall(rf"{re.escape(BASE)}(/\S*)", text)
    writes = [
        path
        for way in ("remote write", "events", "OTLP/HTTP")
        for path in re.findall(rf"{re.escape(BASE)}(/\S*)", lines[way])
    ]
    assert sorted(writes) == ["/api/v1/requests", "/api/v1/write", "/v1/metrics", "/v1/traces"]
    receiver = Receiver(open_store(f"duckdb://{tmp_path / 'w.duckdb'}"), Config())
    for path in writes:
        assert "POST" in _allowed(receiver, path), f"the receiver does not take POST {path}"
    assert READ_PATH in paths and "/" in paths


def test_the_banner_says_where_otlp_grpc_listens_or_how_to_turn_it_on():
    assert "OTLP/gRPC:     0.0.0.0:4317\n" in _banner(Config(otlp_grpc_listen="0.0.0.0:4317"))
    assert "OTLP/gRPC:     off (serve --otlp-grpc-listen HOST:PORT" in _banner(Config())


def test_the_demo_banner_says_how_to_activate_the_venv_then_uses_bare_llmwh():
    text = _banner(Config(), demo=True)
    assert ". .venv/bin/activate" in text
    assert ".venv/bin/llmwh" not in text
    assert "\n    llmwh sla --slo chat-assistant" in text


def test_the_banner_says_when_a_write_is_acknowledged_and_where_the_log_is(tmp_path):
    on = _banner(Config(data_dir=str(tmp_path / "data")))
    assert f"acknowledged:  once synced to the write-ahead log in {tmp_path}/data/wal " in on
    assert "(--no-wal: once in the store)" in on
    off = _banner(Config(data_dir=str(tmp_path / "data"), wal=False))
    assert "acknowledged:  once committed in the store (no write-ahead log: --no-wal)" in off
    assert "wal" not in off.replace("--no-wal", "")
