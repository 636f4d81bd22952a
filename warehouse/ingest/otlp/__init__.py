"""OpenTelemetry in (OTLP/HTTP): spans that are LLM requests become `requests` rows.

:mod:`.wire` parses the bodies and writes the answers, :mod:`.span_mapping` holds which
attribute fills which column (``span_mapping.toml``), :mod:`.spans` turns spans into
checked rows. The receiver serves it at ``POST /v1/traces`` (docs/otlp.md).
"""
