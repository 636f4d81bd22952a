"""The ``attrs`` column: a map (Arrow) or a struct (NDJSON objects) of strings -> sorted maps."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from warehouse.ingest.events.columns import _ColumnTypeError, _is_text
from warehouse.ingest.events.fields import _MAP_TYPE
from warehouse.ingest.events.violations import _Check

_ENTRIES_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.string())]))


def _attrs_column(name: str, column: Any, n: int) -> tuple[Any, list[_Check]]:
    """A map (Arrow) or a struct (NDJSON objects) of strings -> map<string, string>.

    Null values are dropped (no label), keys are sorted within each row; a key twice in
    one row is refused.
    """
    type_ = column.type
    if pa.types.is_null(type_):
        return _empty_maps(n), []
    if pa.types.is_struct(type_):
        if not all(_is_text(f.type) or pa.types.is_null(f.type) for f in type_):
            raise _ColumnTypeError(f"{type_} is not a map of strings")
        return _struct_to_map(_combined(column)), []
    if not (pa.types.is_map(type_) and _is_text(type_.key_type) and _is_text(type_.item_type)):
        raise _ColumnTypeError(f"{type_} is not a map of strings")
    entries = pc.cast(column, _ENTRIES_TYPE)
    flat = pc.list_flatten(entries)
    rows = pc.list_parent_indices(entries)
    if isinstance(flat, pa.ChunkedArray):
        flat, rows = flat.combine_chunks(), rows.combine_chunks()
    entries = pa.table({"row": rows, "key": flat.field("key"), "value": flat.field("value")})
    entries = entries.sort_by([("row", "ascending"), ("key", "ascending")])
    rows, keys = entries.column("row").combine_chunks(), entries.column("key").combine_chunks()
    duplicate = np.zeros(n, dtype=bool)
    if len(rows) > 1:
        same = pc.and_(
            pc.equal(rows.slice(1), rows.slice(0, len(rows) - 1)),
            pc.equal(keys.slice(1), keys.slice(0, len(keys) - 1)),
        )
        duplicate[rows.slice(1).filter(same).to_numpy()] = True
    entries = entries.filter(pc.is_valid(entries.column("value")))
    maps = _maps(
        n,
        entries.column("row").to_numpy(),
        entries.column("key").combine_chunks(),
        entries.column("value").combine_chunks(),
    )
    check = _Check(name, pa.array(duplicate), "must not hold a key twice", maps)
    return maps, [check]


def _combined(column: Any) -> pa.Array:
    return column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column


def _empty_maps(n: int) -> pa.Array:
    return _maps(n, np.zeros(0, np.int64), pa.array([], pa.string()), pa.array([], pa.string()))


def _maps(n: int, rows: np.ndarray, keys: pa.Array, values: pa.Array) -> pa.Array:
    """Maps from entries already ordered by row; ``rows`` gives each entry's row."""
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(np.bincount(rows, minlength=n), out=offsets[1:])
    return pa.MapArray.from_arrays(pa.array(offsets), keys, values, type=_MAP_TYPE)


def _struct_to_map(struct: pa.StructArray) -> pa.Array:
    """Objects parsed as a struct (one child per key seen) -> maps with sorted keys."""
    n = len(struct)
    names = [field.name for field in struct.type]
    children = struct.flatten()  # each child with the parent's nulls applied
    by_name = sorted(range(len(names)), key=names.__getitem__)
    rows, ranks, values = [], [], []
    for key_rank, index in enumerate(by_name):
        child = children[index]
        if pa.types.is_null(child.type) or child.null_count == n:
            continue
        valid = pc.is_valid(child)
        at = pc.indices_nonzero(valid).to_numpy()
        rows.append(at)
        ranks.append(np.full(len(at), key_rank, dtype=np.int32))
        values.append(pc.cast(child.filter(valid), pa.string()))
    if not rows:
        return _empty_maps(n)
    row, rank = np.concatenate(rows), np.concatenate(ranks)
    order = np.lexsort((rank, row))
    keys = pa.array([names[i] for i in by_name], pa.string()).take(pa.array(rank[order]))
    items = pa.concat_arrays(values).take(pa.array(order))
    return _maps(n, row[order], keys, items)
