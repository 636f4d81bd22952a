"""``llmwh serve``: the composition root that puts the parts of a running warehouse together.

:func:`~warehouse.serve.app.build_app` mounts the reads (remote read, the overview and
report pages) and the OTLP/gRPC server on the receiver; :func:`~warehouse.serve.run.run_receiver`
serves it with uvicorn until a signal. This is the one package that imports both the write
path (``ingest``) and the read path (``query``, ``exporters``); neither imports it.
"""

from warehouse.serve.app import build_app

__all__ = ["build_app"]
