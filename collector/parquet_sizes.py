"""How many bytes a batch of Parquet rows holds once its strings are decoded, told without decoding
them: the batch is read with every string column dictionary-encoded (``dictionary_leaves``), where a
value stored once in the file may stand for any number of rows. Sans-I/O, over Arrow arrays."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["DecodedSizes", "byte_slices", "decoded_sizes", "dictionary_leaves", "plain_type"]


@dataclass(frozen=True)
class DecodedSizes:
    """A batch's strings once decoded: bytes per row, per column, and its longest value."""

    per_row: Any  # numpy int64, one per row
    per_column: dict[str, int]
    #: (column, bytes, row in the batch from 0) of the longest string value; ("", 0, 0) if none
    longest: tuple[str, int, int]


def dictionary_leaves(parquet_schema: Any) -> list[int]:
    """The leaf columns of a Parquet schema holding strings or bytes (read them as dictionaries)."""
    return [i for i in range(len(parquet_schema)) if parquet_schema.column(i).physical_type == "BYTE_ARRAY"]


def plain_type(kind: Any) -> Any:
    """``kind`` with every dictionary replaced by its values' type (what decoding makes of it)."""
    import pyarrow as pa

    if pa.types.is_dictionary(kind):
        return plain_type(kind.value_type)
    if pa.types.is_map(kind):
        return pa.map_(plain_type(kind.key_type), plain_type(kind.item_type))
    if pa.types.is_large_list(kind):
        return pa.large_list(kind.value_field.with_type(plain_type(kind.value_type)))
    if pa.types.is_list(kind):
        return pa.list_(kind.value_field.with_type(plain_type(kind.value_type)))
    if pa.types.is_struct(kind):
        return pa.struct([field.with_type(plain_type(field.type)) for field in kind])
    return kind


def _lengths(array: Any) -> Any:
    import pyarrow.compute as pc

    return pc.fill_null(pc.binary_length(array), 0).to_numpy(zero_copy_only=False).astype(np.int64)


def _sizes(array: Any) -> tuple[Any, int, int]:
    """(bytes per row, longest value, its row) of one array's strings, at any depth."""
    import pyarrow as pa
    import pyarrow.compute as pc

    kind = array.type
    rows = len(array)
    if pa.types.is_dictionary(kind):
        lengths = _lengths(array.dictionary)
        indices = pc.fill_null(array.indices, 0).to_numpy(zero_copy_only=False).astype(np.int64)
        per_row = np.where(array.is_null().to_numpy(zero_copy_only=False), 0, lengths[indices]) if rows else lengths[:0]
    elif pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_binary(kind) \
            or pa.types.is_large_binary(kind):
        per_row = _lengths(array)
    elif pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_map(kind):
        # a slice's offsets point into the whole child; a map's child is its entries
        offsets = array.offsets.to_numpy(zero_copy_only=False).astype(np.int64)
        first = int(offsets[0]) if len(offsets) else 0
        offsets = offsets - first
        child, longest, item = _sizes(array.values.slice(first, int(offsets[-1]) if len(offsets) else 0))
        held = np.concatenate(([0], np.cumsum(child)))
        per_row = held[offsets[1:]] - held[offsets[:-1]]
        per_row[array.is_null().to_numpy(zero_copy_only=False)] = 0
        return per_row, longest, int(np.searchsorted(offsets, item, side="right")) - 1 if longest else 0
    elif pa.types.is_struct(kind):
        per_row, longest, row = np.zeros(rows, np.int64), 0, 0
        for field in array.flatten():
            field_rows, field_longest, field_row = _sizes(field)
            per_row += field_rows
            if field_longest > longest:
                longest, row = field_longest, field_row
        return per_row, longest, row
    else:  # fixed width: as long decoded as read
        return np.zeros(rows, np.int64), 0, 0
    if not len(per_row):
        return per_row, 0, 0
    row = int(np.argmax(per_row))
    return per_row, int(per_row[row]), row


def decoded_sizes(batch: Any) -> DecodedSizes:
    """The sizes of ``batch``'s strings once decoded (``batch`` read with ``dictionary_leaves``)."""
    per_row = np.zeros(batch.num_rows, np.int64)
    per_column: dict[str, int] = {}
    longest: tuple[str, int, int] = ("", 0, 0)
    for name, column in zip(batch.schema.names, batch.columns, strict=True):
        rows, most, row = _sizes(column)
        per_row += rows
        per_column[name] = int(rows.sum())
        if most > longest[1]:
            longest = (name, most, row)
    return DecodedSizes(per_row, per_column, longest)


def byte_slices(per_row: Any, max_bytes: int) -> list[tuple[int, int]]:
    """(start, length) runs of rows, in order, each holding at most ``max_bytes`` (or one row)."""
    if int(per_row.sum()) <= max_bytes:  # the common case: the whole batch at once
        return [(0, len(per_row))] if len(per_row) else []
    slices: list[tuple[int, int]] = []
    start, held = 0, 0
    for row, size in enumerate(per_row.tolist()):
        if row > start and held + size > max_bytes:
            slices.append((start, row - start))
            start, held = row, 0
        held += size
    if start < len(per_row):
        slices.append((start, len(per_row) - start))
    return slices
