"""Wire formats, below both the write path (``ingest``) and the read path (``query``).

:mod:`~warehouse.wire.prometheus` holds the remote-write and remote-read protobuf
messages (and the views that read them by columns); :mod:`~warehouse.wire.compression`
inflates bodies (gzip, zstd, snappy) under one bound. Neither does I/O.
"""
