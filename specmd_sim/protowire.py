"""Protocol-buffer messages written a column at a time: many rows of one message shape at once.

A message's fields are *blocks*: for ``n`` rows, a ``(n, w)`` (or ``(1, w)``, the same for every
row) ``uint8`` array holding each row's bytes left-aligned, and each row's length (an ``(n,)``
array, or one int for all). A field absent from a row has length 0 there. :func:`flatten`
writes the rows one after another, each the concatenation of its blocks, a byte column of a
block at a time, so building a million messages is a few numpy operations per field, not a
million Python objects (the encoding is the wire format's: varints, fixed64, doubles,
length-delimited strings and sub-messages, https://protobuf.dev/programming-guides/encoding/).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

Lengths = np.ndarray | int
Block = tuple[np.ndarray, Lengths]
Blocks = list[Block]

VARINT, FIXED64, LEN = 0, 1, 2


def _key(number: int, wire: int) -> Block:
    data = varint(np.array([number << 3 | wire], np.uint64))[0]
    return data, data.shape[1]


def varint(values: npt.ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """Each value (>= 0, below 2**64) as a varint: ``(n, w)`` bytes left-aligned, and lengths."""
    rest = np.asarray(values).astype(np.uint64)
    n = rest.size
    groups, length = [], np.ones(n, np.int64)
    while True:
        byte = (rest & np.uint64(0x7F)).astype(np.uint8)
        rest = rest >> np.uint64(7)
        more = rest > 0
        groups.append(byte | (more.astype(np.uint8) << 7))
        if not more.any():
            break
        length += more
    return np.stack(groups, axis=1) if n else np.zeros((0, 1), np.uint8), length


def const_varint(number: int, value: int) -> Blocks:
    """A varint field of the same value in every row."""
    data = np.concatenate((_key(number, VARINT)[0], varint([value])[0]), axis=1)
    return [(data, data.shape[1])]


def _present(length: Lengths, present: np.ndarray | None) -> Lengths:
    if present is None:
        return length
    return np.where(present, length, 0)


def field_varint(number: int, values: npt.ArrayLike, present: np.ndarray | None = None) -> Blocks:
    """A varint field (``int64`` >= 0, ``uint64``, an enum, a bool) where ``present``."""
    data, length = varint(values)
    key, key_len = _key(number, VARINT)
    return [(key, _present(key_len, present)), (data, _present(length, present))]


def field_fixed64(number: int, values: npt.ArrayLike, present: np.ndarray | None = None) -> Blocks:
    """A ``fixed64`` field (little-endian, 8 bytes) where ``present``."""
    return _field_8_bytes(number, values, "<u8", present)


def field_double(number: int, values: npt.ArrayLike, present: np.ndarray | None = None) -> Blocks:
    """A ``double`` field where ``present``."""
    return _field_8_bytes(number, values, "<f8", present)


def _field_8_bytes(
    number: int, values: npt.ArrayLike, dtype: str, present: np.ndarray | None
) -> Blocks:
    """A field of 8 bytes a value (wire type 1): ``values`` as ``dtype``, where ``present``."""
    data = np.ascontiguousarray(np.asarray(values).astype(dtype)).view(np.uint8).reshape(-1, 8)
    key, key_len = _key(number, FIXED64)
    return [(key, _present(key_len, present)), (data, _present(8, present))]


def table(texts: Sequence[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """Byte strings as one ``(k, w)`` array, left-aligned, and their lengths: for
    :func:`field_bytes` to pick rows of."""
    width = max((len(t) for t in texts), default=0) or 1
    data = np.zeros((len(texts), width), np.uint8)
    for i, text in enumerate(texts):
        data[i, : len(text)] = np.frombuffer(text, np.uint8)
    return data, np.array([len(t) for t in texts], np.int64)


def field_bytes(
    number: int, strings: tuple[np.ndarray, np.ndarray], index: npt.ArrayLike,
    present: np.ndarray | None = None,
) -> Blocks:  # fmt: skip
    """A ``string`` or ``bytes`` field: row ``i`` holds ``strings`` (a :func:`table`) row
    ``index[i]``, where ``present``."""
    index = np.asarray(index, np.int64)
    data, length = strings[0][index], strings[1][index]
    size, size_len = varint(length)
    key, key_len = _key(number, LEN)
    return [
        (key, _present(key_len, present)),
        (size, _present(size_len, present)),
        (data, _present(length, present)),
    ]


def row_lengths(blocks: Blocks, n: int) -> np.ndarray:
    """Each row's length in bytes."""
    total = np.zeros(n, np.int64)
    for _, length in blocks:
        total += length
    return total


def field_message(number: int, blocks: Blocks, n: int, present: np.ndarray | None = None) -> Blocks:
    """A sub-message field made of ``blocks`` (``n`` rows), where ``present``."""
    inner = [(data, _present(length, present)) for data, length in blocks]
    size, size_len = varint(row_lengths(inner, n))
    key, key_len = _key(number, LEN)
    return [(key, _present(key_len, present)), (size, _present(size_len, present)), *inner]


def flatten(blocks: Blocks, n: int) -> bytes:
    """The ``n`` rows' bytes, one row after another, each its blocks' bytes in order: each
    block's bytes scattered to where its rows put them, a byte column at a time."""
    lengths = row_lengths(blocks, n)
    out = np.empty(int(lengths.sum()), np.uint8)
    at = np.cumsum(lengths) - lengths  # where each row's next block goes
    for data, length in blocks:
        if np.ndim(length) == 0:
            for j in range(int(length)):
                out[at + j] = data[:, j]
        else:
            for j in range(data.shape[1]):
                rows = np.flatnonzero(length > j)
                out[at[rows] + j] = data[rows, j] if data.shape[0] > 1 else data[0, j]
        at += length
    return out.tobytes()
