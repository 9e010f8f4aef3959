"""The optional ``arrival_s`` array: validation, ``request_arrivals`` and save/load."""

from __future__ import annotations

import json
import mmap
import re
import zipfile
from pathlib import Path

import numpy as np
import pytest

from specmd_sim.errors import SpecmdError
from specmd_sim.traces.io import load_trace, save_trace
from specmd_sim.traces.trace import Trace, make_trace

E, L, K = 8, 2, 2


def small(
    request: list[int], arrival_s: object = None, phase: list[int] | None = None, **kw: object
) -> Trace:
    """A tiny mixtral-shaped trace with the given per-row requests (and arrivals)."""
    t = len(request)
    experts = np.tile(np.array([0, 1], np.int16), (t, L, 1))
    return make_trace(
        experts,
        model="mixtral-8x7b",
        num_experts=E,
        request=np.array(request),
        phase=None if phase is None else np.array(phase),
        arrival_s=arrival_s,
        **kw,
    )


def raises(fragments: tuple[str, ...], **kw: object) -> str:
    with pytest.raises(SpecmdError) as info:
        small(**kw)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("trace: arrival_s: expected ")
    for fragment in fragments:
        assert fragment in message, (fragment, message)
    return message


# --- in memory ----------------------------------------------------------------------------


def test_absent_by_default() -> None:
    tr = small([0, 0, 1])
    assert tr.arrival_s is None
    assert tr.request_arrivals() is None


def test_stored_as_float64_and_ints_accepted() -> None:
    tr = small([0, 0, 1, 1], arrival_s=np.array([0, 0, 2, 2], np.int64))
    assert tr.arrival_s.dtype == np.float64 and tr.arrival_s.shape == (4,)
    assert tr.arrival_s.tolist() == [0.0, 0.0, 2.0, 2.0]
    tr32 = small([0, 1], arrival_s=np.array([0.5, 1.5], np.float32))
    assert tr32.arrival_s.dtype == np.float64


def test_request_arrivals_in_first_appearance_order() -> None:
    # requests appear as 7, 2, 5 (interleaved rows); ids are not sorted, nor contiguous
    request = [7, 7, 2, 7, 5, 2, 5]
    times = {7: 0.0, 2: 0.25, 5: 0.25}
    tr = small(request, arrival_s=[times[r] for r in request])
    got = tr.request_arrivals()
    assert got is not None and got.dtype == np.float64
    assert got.tolist() == [0.0, 0.25, 0.25]
    ids = tr.request[np.sort(np.unique(tr.request, return_index=True)[1])]
    assert ids.tolist() == [7, 2, 5]  # the documented matching ids


def test_request_arrivals_not_sorted_by_id() -> None:
    tr = small([3, 3, 1, 0], arrival_s=[1.0, 1.0, 2.0, 5.5])
    assert tr.request_arrivals().tolist() == [1.0, 2.0, 5.5]


# --- validation ---------------------------------------------------------------------------


def test_wrong_dimensions() -> None:
    raises(("1 dimensions", "got shape (2, 1)"), request=[0, 1], arrival_s=[[0], [1]])


def test_wrong_length() -> None:
    raises(("shape [3] (one per token)", "got shape [2]"), request=[0, 0, 1], arrival_s=[0.0, 1.0])


def test_wrong_dtype() -> None:
    raises(("a float64 array", "dtype bool"), request=[0, 1], arrival_s=np.array([False, True]))
    raises(("a float64 array", "dtype <U"), request=[0, 1], arrival_s=np.array(["0", "1"]))


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_not_finite(bad: float) -> None:
    message = raises(("finite times", "at row 2"), request=[0, 0, 1], arrival_s=[0.0, 0.0, bad])
    assert f"got {float(bad)} at row 2" in message


def test_negative() -> None:
    raises(("times >= 0", "got -0.5 at row 1"), request=[0, 0, 1, 1], arrival_s=[1.0, -0.5, 2, 2])


def test_differs_within_request() -> None:
    # request 4 (rows 1, 3) is the first with two times; request 9 (rows 2, 4) differs later
    message = raises(
        (
            "one arrival time per request",
            "request 4 with 0.5 at row 1 and 0.75 at row 3",
        ),
        request=[2, 4, 9, 4, 9],
        arrival_s=[0.0, 0.5, 1.0, 0.75, 3.0],
    )
    assert "request 9" not in message


def test_earlier_than_predecessor() -> None:
    # requests appear as 5, 3, 8; 8 arrives before 3 (but not before 5)
    request = [5, 5, 3, 8, 3, 8]
    times = {5: 1.0, 3: 2.5, 8: 2.0}
    message = raises(
        (
            "non-decreasing in order of first appearance",
            "request 8 at 2.0 s before request 3 at 2.5 s",
        ),
        request=request,
        arrival_s=[times[r] for r in request],
    )
    assert re.search(r"got request 8 .* request 3 ", message)


def test_equal_arrivals_and_zero_are_fine() -> None:
    tr = small([0, 1, 2, 1, 0], arrival_s=[0.0, 0.0, 0.0, 0.0, 0.0])
    assert tr.request_arrivals().tolist() == [0.0, 0.0, 0.0]


def test_id_order_does_not_matter_only_first_appearance() -> None:
    # request 9 appears first and arrives first; ids decreasing is fine
    tr = small([9, 1, 9, 1], arrival_s=[0.0, 1.0, 0.0, 1.0])
    assert tr.request_arrivals().tolist() == [0.0, 1.0]


# --- save / load --------------------------------------------------------------------------


def arrival_trace() -> Trace:
    request = [0, 0, 1, 0, 1, 2, 2]
    phase = [0, 0, 0, 1, 1, 0, 1]
    times = {0: 0.0, 1: 0.125, 2: 3.75}
    return small(request, arrival_s=[times[r] for r in request], phase=phase, note="x")


def memory_mapped(arr: np.ndarray) -> bool:
    """Whether ``arr`` (or an array it is a view of) lives in a memory-mapped file."""
    base: object = arr
    while base is not None:
        if isinstance(base, np.memmap | mmap.mmap):
            return True
        base = getattr(base, "base", None)
    return False


@pytest.mark.parametrize("compress", [True, False])
def test_round_trip(tmp_path: Path, compress: bool) -> None:
    tr = arrival_trace()
    path = save_trace(tr, tmp_path / "a.npz", compress=compress)
    with zipfile.ZipFile(path) as zf:
        names = [info.filename for info in zf.infolist()]
    assert "arrival_s.npy" in names
    again = load_trace(path)
    assert again.arrival_s is not None and again.arrival_s.dtype == np.float64
    assert np.array_equal(again.arrival_s, tr.arrival_s)
    assert again.request_arrivals().tolist() == [0.0, 0.125, 3.75]
    assert memory_mapped(again.arrival_s) == (not compress)
    for name in ("experts", "request", "phase"):
        assert np.array_equal(getattr(again, name), getattr(tr, name)), name
    assert again.meta == tr.meta


@pytest.mark.parametrize("compress", [True, False])
def test_save_is_byte_reproducible(tmp_path: Path, compress: bool) -> None:
    a = save_trace(arrival_trace(), tmp_path / "a.npz", compress=compress)
    b = save_trace(arrival_trace(), tmp_path / "b.npz", compress=compress)
    assert a.read_bytes() == b.read_bytes()


@pytest.mark.parametrize("compress", [True, False])
def test_without_arrivals_loads_as_none(tmp_path: Path, compress: bool) -> None:
    tr = small([0, 0, 1])
    path = save_trace(tr, tmp_path / "n.npz", compress=compress)
    with zipfile.ZipFile(path) as zf:
        assert "arrival_s.npy" not in zf.namelist()
    again = load_trace(path)
    assert again.arrival_s is None and again.request_arrivals() is None


def test_bundled_trace_has_no_arrivals() -> None:
    tr = load_trace("olmoe-synthetic")
    assert tr.arrival_s is None and tr.request_arrivals() is None


def test_invalid_arrivals_on_load_name_the_file(tmp_path: Path) -> None:
    meta = {"format": "specmd-trace", "version": 1, "model": "mixtral-8x7b", "num_layers": L,
            "num_experts": E, "top_k": K}  # fmt: skip
    arrays = {
        "experts": np.tile(np.array([0, 1], np.int16), (3, L, 1)),
        "request": np.array([0, 1, 1], np.int32),
        "phase": np.ones(3, np.uint8),
        "arrival_s": np.array([2.0, 1.0, 1.0]),
    }
    path = tmp_path / "bad.npz"
    np.savez(path, meta=np.array(json.dumps(meta)), **arrays)
    with pytest.raises(SpecmdError) as info:
        load_trace(path)
    assert str(info.value) == (
        f"trace {path}: arrival_s: expected request arrivals non-decreasing in order of first "
        "appearance (FCFS), got request 1 at 1.0 s before request 0 at 2.0 s (which appears first)"
    )
