"""Coverage-guided fuzzing of the receiver's decoders with atheris (libFuzzer).

Every decoder must answer any bytes with rows or an :class:`IngestError`; anything
else (another exception, a hang, a crash of the C decoder) is a finding. The first
byte of an input picks the decoder, the rest is the decompressed body:

    0  remote write 1.0, C decoder first (as the receiver decodes a body alone)
    1  remote write 1.0, the Python decoder
    2  remote write 2.0
    3  NDJSON events
    4  Arrow IPC stream events

For 1.0 it also checks that where the C decoder takes a body, the Python decoder
gives the same series and samples.

    .venv/bin/python fuzz/decoders.py -max_total_time=60 [CORPUS_DIR]

Without a corpus directory it starts from real payloads (see :func:`seeds`).
"""

from __future__ import annotations

import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

import atheris
import pyarrow as pa

# Only the warehouse's own code is instrumented: coverage inside pyarrow would add
# nothing the decoders decide, and instrumenting it took a minute of every run.
with atheris.instrument_imports(include=["warehouse"]):
    from warehouse.errors import IngestError
    from warehouse.ingest import events, remote_write

DECODERS = 5


def seeds() -> dict[str, bytes]:
    """Real payloads, one per decoder: the fuzzer mutates from these."""
    import cramjam

    from warehouse.synthetic import synthetic_requests
    from warehouse.synthetic.samples import remote_write_body
    from warehouse.wire.prometheus import V2

    # A fixed start: seeds stamped with the clock would differ, and so would every run.
    requests = synthetic_requests(3, seed=1, start=datetime(2026, 1, 1, tzinfo=UTC))
    v1 = bytes(cramjam.snappy.decompress_raw(remote_write_body(requests)))
    v2 = V2.Request(symbols=["", "__name__", "up", "job", "api"])
    v2.timeseries.add(labels_refs=[1, 2, 3, 4]).samples.add(value=1.0, timestamp=1_700_000_000_000)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, requests.schema) as writer:
        writer.write_table(requests)
    return {
        "v1_c": b"\x00" + v1,
        "v1_python": b"\x01" + v1,
        "v2": b"\x02" + v2.SerializeToString(),
        "ndjson": b"\x03" + events.encode_ndjson(requests),
        "arrow": b"\x04" + sink.getvalue().to_pybytes(),
    }


def test_one_input(data: bytes) -> None:
    if not data:
        return
    which, body = data[0] % DECODERS, data[1:]
    try:
        if which == 0:
            decoded = remote_write.decode_v1(body)
            _same_as_python(body, decoded)
        elif which == 1:
            remote_write._decode_v1_python(body)
        elif which == 2:
            remote_write.decode_v2(body)
        elif which == 3:
            events.decode_ndjson(body)
        else:
            events.decode_arrow_stream(body)
    except IngestError as exc:
        if not str(exc).strip():
            raise AssertionError("an IngestError without a message") from exc


def _same_as_python(body: bytes, decoded: remote_write.DecodedWrite) -> None:
    if not remote_write.FAST_V1:
        return
    expected = remote_write._decode_v1_python(body)
    for name in ("series", "samples"):
        got, want = getattr(decoded, name), getattr(expected, name)
        if not got.equals(want) and not _equal_with_nans(got, want):
            raise AssertionError(f"C and Python decoders differ on {name}")


def _equal_with_nans(a: pa.Table, b: pa.Table) -> bool:
    """Tables equal but for NaN != NaN in float columns."""
    if a.schema != b.schema or a.num_rows != b.num_rows:
        return False
    for column in a.column_names:
        x, y = a.column(column).combine_chunks(), b.column(column).combine_chunks()
        if pa.types.is_floating(x.type):
            if (
                x.to_numpy(zero_copy_only=False).tobytes()
                != y.to_numpy(zero_copy_only=False).tobytes()
            ):
                return False
        elif not x.equals(y):
            return False
    return True


def main(argv: list[str]) -> None:
    if not any(not arg.startswith("-") for arg in argv[1:]):
        corpus = Path(tempfile.mkdtemp(prefix="llmwh-fuzz-"))
        for name, data in seeds().items():
            (corpus / name).write_bytes(data)
        argv = [*argv, str(corpus)]
    atheris.Setup(argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main(sys.argv)
