"""Rows of a structured dtype appended one at a time, packed into arrays, and spilled to disk
past a bound, so that a recording's memory does not grow with the length of the run.

A run records spans and counter samples by the million (one span or more per expert access):
as Python tuples they would take ~200 bytes each, packed ~16-42, and even packed a long run's
rows outgrow memory (a DeepSeek-V3 decode of 100k tokens records ~115M spans, ~5 GB packed).
:class:`PackedRows` series sharing a :class:`SpillBudget` therefore hold at most its ``limit``
of packed rows together: past that, the series holding the most writes its rows to a temporary
file as a *run* (sorted by its ``keys`` first, where it has any; written on a thread of its own
while the recording goes on) and starts again.
:meth:`PackedRows.array` gives every row as one array: in memory when nothing was spilled,
else mapped from a file (``np.memmap``, read only), the runs merged into it a block at a time,
so neither the recording nor giving out its rows holds more than a bound set by the budget and
:data:`MERGE_BYTES`, however long the run and however many series it records. The rows are
the same, byte for byte, either way. The temporary folder goes when neither the rows nor any
array mapped from it is referenced any more (or at exit).
"""

from __future__ import annotations

import contextlib
import tempfile
import threading
from pathlib import Path
from typing import Any

import numpy as np

from specmd_sim.atomic import reason
from specmd_sim.errors import SpecmdError

SPILL_BYTES = 64 << 20
"""Packed rows a recording holds in memory, over all its series (the spans, a few counters per
GPU, one per network resource), before the largest spills to disk."""
MERGE_BYTES = 32 << 20
"""Rows read at once, over all runs, while merging sorted runs into one file (or joining them
in place, :meth:`PackedRows._join`)."""


class SpillBudget:
    """Packed rows that several :class:`PackedRows` hold in memory together: at most ``limit``
    bytes; past it, the series holding the most spills its rows to disk (until within it).

    A spilled run is written on a thread of its own (:class:`_Write`: writing a file releases
    the GIL) while the recording goes on, one run at a time over all the members: the next
    spill waits for it before it sorts its rows, and any reading of the spill files before it
    reads. So at most one run's sorted copy is held beside the rows, as when it was written in
    place. A run that could not be written fails every later spill and read of the budget's
    series (the rows are incomplete). The thread keeps the run's temporary folder, and the
    interpreter waits for it at exit, before the folders are removed."""

    __slots__ = ("_failed", "_writing", "held", "limit", "members")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0  # bytes of packed rows the members hold
        self.members: list[PackedRows] = []
        self._writing: _Write | None = None
        self._failed: Exception | None = None  # a run not written: every later read fails

    def add(self, nbytes: int) -> None:
        self.held += nbytes
        while self.held > self.limit:
            max(self.members, key=PackedRows.held_bytes)._spill()

    def write(self, path: Path, rows: np.ndarray, folder: object) -> None:
        """Append ``rows`` to ``path`` on a thread of its own, once the run before is written
        (``folder``, the file's temporary folder, kept until it is)."""
        self.written()
        self._writing = _Write(path, rows, folder)

    def written(self) -> None:
        """Wait for the run being written; raises what writing it met (an ``OSError``: no
        room, say), and again at every later call."""
        writing, self._writing = self._writing, None
        if writing is not None:
            self._failed = writing.join()
        if self._failed is not None:
            raise self._failed


class _Write:
    """Rows appended to a file on a thread of its own (``tofile`` releases the GIL)."""

    __slots__ = ("_error", "_thread")

    def __init__(self, path: Path, rows: np.ndarray, folder: object) -> None:
        self._error: Exception | None = None
        # (not a daemon: the interpreter's exit waits for it before removing ``folder``)
        self._thread = threading.Thread(target=self._run, args=(path, rows, folder))
        self._thread.start()

    def _run(self, path: Path, rows: np.ndarray, folder: object) -> None:
        try:
            with path.open("ab") as out:
                rows.tofile(out)
        except Exception as err:  # (given to the recording's thread, whatever it is)
            self._error = err

    def join(self) -> Exception | None:
        """Wait for the write; what it raised, if anything."""
        self._thread.join()
        return self._error


class PackedRows:
    """Rows of a structured ``dtype``, appended in order as tuples (the cheapest thing to do
    per row) and packed every ``chunk_rows`` into one array that grows in place, spilled to a
    temporary file where ``budget`` (shared with other series; default: its own, of
    ``spill_bytes``) is exceeded and this series holds the most.

    The array grows by an eighth at a time, so it holds at most an eighth more rows than were
    packed, by ``ndarray.resize``: ``realloc``, which on Linux remaps a large array's pages
    rather than copy them, so growing does not hold the rows twice. :meth:`array` gives the
    rows out, sorted by ``keys`` (fields, the first the most significant; ties in the order
    appended) and keeps what it gave; should rows come after that, they grow a copy or a new
    run, leaving the array given out as it was.

    With ``last_at_instant`` (a step function's samples, appended in time order), of the rows
    of one ``time`` only the last is kept: the value that holds from that instant on. The last
    row appended waits outside the array until a row of a later time (or :meth:`array`) says
    it was the last of its instant, so a series keeps one row per instant however its rows
    were chunked or spilled (a row appended after :meth:`array`, at the instant of the last
    one given out, is kept beside it).
    """

    __slots__ = (
        "_budget",
        "_data",
        "_dtype",
        "_folder",
        "_given_out",
        "_keys",
        "_last_at_instant",
        "_merges",
        "_pending",
        "_runs",
        "_size",
        "_spill_mapped",
        "_spill_rows",
        "_spilled",
        "chunk_rows",
        "rows",
    )  # fmt: skip

    def __init__(
        self,
        dtype: np.dtype[Any],
        chunk_rows: int,
        keys: tuple[str, ...] = (),
        spill_bytes: int = SPILL_BYTES,
        budget: SpillBudget | None = None,
        last_at_instant: bool = False,
    ) -> None:
        self._dtype = dtype
        self._last_at_instant = last_at_instant
        self._pending: np.ndarray | None = None  # the last row, while its instant may go on
        self.chunk_rows = chunk_rows
        self._keys = keys
        self._budget = SpillBudget(spill_bytes) if budget is None else budget
        self._budget.members.append(self)
        self._spill_rows = max(1, self._budget.limit // dtype.itemsize)  # at most, alone
        self.rows: list[tuple[Any, ...]] = []  # appended since the last pack (always this list)
        self._data = np.empty(0, dtype)
        self._size = 0
        self._given_out = False
        self._folder: tempfile.TemporaryDirectory[str] | None = None
        self._runs: list[tuple[Path, int, int]] = []  # spilled: (file, first row, rows)
        self._spilled = 0  # rows in the spill file
        self._merges = 0
        self._spill_mapped = False  # an array given out maps the spill file

    def append(self, row: tuple[Any, ...]) -> None:
        rows = self.rows
        rows.append(row)
        if len(rows) == self.chunk_rows:
            self.pack()

    def pack(self) -> None:
        """Move the rows appended as tuples into the array (``np.fromiter`` of a known count:
        the bytes ``np.array`` would give, in less time)."""
        chunk = np.fromiter(self.rows, self._dtype, len(self.rows))
        self.rows.clear()
        self._place(chunk)

    def extend(self, rows: np.ndarray) -> None:
        """Append ``rows`` (an array of this ``dtype``) after every row appended so far."""
        if self.rows:
            self.pack()
        self._place(rows)

    def _place(self, rows: np.ndarray) -> None:
        if self._last_at_instant and len(rows):
            if self._pending is not None:
                rows = np.concatenate((self._pending, rows))
            time = rows["time"]
            last = np.r_[time[1:] != time[:-1], False]  # the last of its instant, but the end
            self._pending = rows[-1:].copy()
            rows = rows[last]
        self._put(rows)

    def _put(self, rows: np.ndarray) -> None:
        while len(rows):
            if self._size == self._spill_rows:  # full, whatever the others hold
                self._spill()
            room = self._spill_rows - self._size
            part, rows = rows[:room], rows[room:]
            end = self._size + len(part)
            if end > len(self._data):
                self._resize(min(end + end // 8, self._spill_rows))
            self._data[self._size : end] = part
            self._size = end
            self._budget.add(len(part) * self._dtype.itemsize)

    def held_bytes(self) -> int:
        """Bytes of packed rows this holds in memory."""
        return self._size * self._dtype.itemsize

    def leave_budget(self) -> None:
        """Stop counting against the budget: the series is dropped, its rows taken out whole
        (the others' spilling no longer weighs them, nor spills them)."""
        self._budget.held -= self.held_bytes()
        self._budget.members.remove(self)

    def _resize(self, rows: int) -> None:
        """Make the array ``rows`` long, keeping its packed rows: in place (nothing else holds
        it or a view of it), or as a copy once it has been given out."""
        if self._given_out:
            data = np.empty(rows, self._dtype)
            data[: self._size] = self._data[: self._size]
            self._data, self._given_out = data, False
        else:
            self._data.resize(rows, refcheck=False)

    def _spill(self) -> None:
        """Write the packed rows (sorted, as a run) to the spill file (on a thread of its own:
        :meth:`SpillBudget.write`) and start again."""
        try:
            self._budget.written()  # (the run before written, and its sorted copy gone)
        except OSError as err:
            raise _spill_error(err) from None
        rows = _sorted(self._data[: self._size], self._keys)  # (the array itself goes below)
        try:
            if self._folder is None:
                self._folder = tempfile.TemporaryDirectory(
                    prefix="specmd-rows-", ignore_cleanup_errors=True
                )
            path = self._spill_file()
            self._budget.write(path, rows, self._folder)
        except OSError as err:
            raise _spill_error(err) from None
        self._runs.append((path, self._spilled, self._size))
        self._spilled += self._size
        self._budget.held -= self.held_bytes()
        self._size = 0
        self._data, self._given_out = np.empty(0, self._dtype), False  # its memory goes too

    def array(self) -> np.ndarray:
        """Every row, sorted by ``keys`` (ties in the order appended), as one array: the one
        this holds in memory, cut to its rows and sorted, or, once rows were spilled, the runs
        merged into a file and mapped (read only)."""
        if self.rows:
            self.pack()
        if self._pending is not None:  # the last row: no later one will share its instant
            pending, self._pending = self._pending, None
            self._put(pending)
        if not self._runs:
            if self._keys:
                self._data = _sorted(self._data[: self._size], self._keys)
            elif len(self._data) != self._size:
                self._resize(self._size)
            self._given_out = True
            return self._data
        if self._size:
            self._spill()
        try:
            self._budget.written()
        except OSError as err:
            raise _spill_error(err) from None
        if len(self._runs) > 1 and self._keys:
            try:
                joined = self._join()
                merged = None if joined else self._merge()
            except OSError as err:
                raise _spill_error(err) from None
            if merged is not None:
                with contextlib.suppress(OSError):  # (where an array mapped from it is still
                    self._runs[-1][0].unlink()  # given out, Windows keeps it till the folder goes)
                self._runs, self._spilled, self._spill_mapped = [merged], 0, False
        elif len(self._runs) > 1:  # unsorted runs follow each other in their file from row 0
            self._runs = [(self._runs[0][0], 0, self._spilled)]
        path, first, rows = self._runs[0]
        self._spill_mapped |= path == self._spill_file()
        mapped = np.memmap(path, self._dtype, "r", first * self._dtype.itemsize, (rows,))
        mapped.spill_folder = self._folder  # type: ignore[attr-defined]  # kept while mapped
        return np.asarray(mapped)

    def _spill_file(self) -> Path:
        """The file runs are spilled to: one per merge, so that a file an array given out still
        maps, which Windows cannot delete, is never written again."""
        assert self._folder is not None
        return Path(self._folder.name) / f"spilled-{self._merges}.bin"

    def _join(self) -> bool:
        """Make the sorted runs one in place, where each overlaps the rows before it by little
        (a run's rows start where the rows spilled before it end, but for those recorded late):
        the runs follow each other in the spill file, so of each run and the rows before it only
        the rows out of place are read, sorted and written back, from the first row before it
        that sorts after its first row to its last row that sorts before the rows' last. Not
        where that is more than :data:`MERGE_BYTES` of rows (the runs joined so far then are
        the first run), nor where an array given out maps the file; returns whether it did."""
        runs, size, keys = self._runs, self._dtype.itemsize, self._keys
        path = runs[0][0]
        if self._spill_mapped or path != self._spill_file():  # (its first run is at row 0)
            return False
        while len(runs) > 1:
            first, rows = runs[1][1], runs[1][2]  # (the runs follow each other: first = rows)
            whole = np.memmap(path, self._dtype, "r", 0, (first + rows,))
            before, run = whole[:first], whole[first:]
            head, tail = tuple(run[0][k] for k in keys), tuple(before[-1][k] for k in keys)
            if any(v != v for v in head + tail):  # (a NaN key: sorted last, equal to nothing)
                return False
            cut, upto = _rank(before, keys, head, "right"), _rank(run, keys, tail, "left")
            if (first - cut + upto) * size > MERGE_BYTES:
                return False
            region = _sorted(np.concatenate((before[cut:], run[:upto])), keys)
            del whole, before, run  # (the map closed before the file is written)
            if region.size:
                with path.open("r+b") as out:
                    out.seek(cut * size)
                    region.tofile(out)
            self._runs = runs = [(path, 0, first + rows), *runs[2:]]
        return True

    def _merge(self) -> tuple[Path, int, int]:
        """The sorted runs merged into a file of their own (one run): up to a block of each run
        at a time in memory (each row read once), of which every row up to the least of the
        blocks' last rows (by ``keys``, then the order appended: the run, then the row in it)
        is final when the run has more rows after its block."""
        assert self._folder is not None
        runs = self._runs
        self._merges += 1
        path = Path(self._folder.name) / f"merged-{self._merges}.bin"
        size = self._dtype.itemsize
        block = max(1, MERGE_BYTES // (size * len(runs)))
        pending = [np.empty(0, self._dtype) for _ in runs]  # read, not yet written
        read = [0] * len(runs)
        with path.open("wb") as out:
            while True:
                bound: tuple[Any, ...] | None = None
                for run, (src, first, rows) in enumerate(runs):
                    count = min(block - len(pending[run]), rows - read[run])
                    if count > 0:
                        more = np.fromfile(
                            src, self._dtype, count, offset=(first + read[run]) * size
                        )
                        pending[run] = np.concatenate((pending[run], more))
                        read[run] += count
                    part = pending[run]
                    if len(part) and read[run] < rows:  # rows of this run come after it
                        last = (*(part[k][-1] for k in self._keys), run, read[run] - 1)
                        bound = last if bound is None or last < bound else bound
                if not any(len(part) for part in pending):
                    return path, 0, sum(rows for _, _, rows in runs)
                taken = []
                for run, part in enumerate(pending):
                    upto = len(part)
                    if bound is not None:
                        upto = _upto(part, run, read[run] - len(part), self._keys, bound)
                    taken.append(part[:upto])
                    pending[run] = part[upto:]
                # the blocks in the order of their runs, so ties keep the order appended
                _sorted(np.concatenate(taken), self._keys).tofile(out)


def _spill_error(err: OSError) -> SpecmdError:
    return SpecmdError(
        f"spans: could not spill recorded rows to {tempfile.gettempdir()} "
        f"({reason(err)}): expected a temporary folder with room for them (set "
        "TMPDIR), or record none (timing.record_spans: false)"
    )


def _rank(rows: np.ndarray, keys: tuple[str, ...], bound: tuple[Any, ...], side: str) -> int:
    """How many of ``rows`` (sorted by ``keys``) sort before ``bound`` (the keys of a row):
    those of lesser keys, and with ``side`` ``"right"`` those of equal keys too. A binary
    search a row at a time: on rows mapped from a file it reads a few pages, where
    ``np.searchsorted`` would first copy the whole column."""
    lo, hi = 0, len(rows)
    while lo < hi:
        mid = (lo + hi) // 2
        row = rows[mid]
        at = tuple(row[k] for k in keys)
        if at < bound or (side == "right" and at == bound):
            lo = mid + 1
        else:
            hi = mid
    return lo


def _upto(
    part: np.ndarray, run: int, at: int, keys: tuple[str, ...], bound: tuple[Any, ...]
) -> int:
    """How many rows of ``part`` (run ``run``'s rows from its row ``at``, sorted by ``keys``)
    are at most ``bound`` (keys, then run, then row)."""
    if run == bound[-2]:
        upto = np.arange(at, at + len(part)) <= bound[-1]
    else:
        upto = np.full(len(part), run < bound[-2])
    for i in range(len(keys) - 1, -1, -1):
        values = part[keys[i]]
        upto = (values < bound[i]) | ((values == bound[i]) & upto)
    return int(upto.sum())


def _sorted(rows: np.ndarray, keys: tuple[str, ...]) -> np.ndarray:
    """``rows`` sorted by ``keys`` (the first the most significant; ties in their order): a
    copy (of at most ``spill_bytes`` or ``MERGE_BYTES``), or ``rows`` itself without keys."""
    if not keys:
        return rows
    return np.take(rows, np.lexsort(tuple(rows[k] for k in reversed(keys))))
