"""The compiled core's pace (:meth:`_Core._pace`): what it tells an online schedule a pass will
take, from the passes of its GPU that ran. The differential tests of the online schedule show a
wrong pace changes no result (``test_online_schedule.py``); this one checks the pace itself
against the passes' recorded times, by hand."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from specmd_sim.engine.fast.timed import state as T
from specmd_sim.engine.sim.compiled import _Core
from specmd_sim.traces.trace import DECODE, PREFILL

# GPU 1's passes (GPU 0's rows come first in the core's tables): tokens, phase, seconds taken
TOKENS = [4, 1, 1, 2, 1, 8]
PHASES = [PREFILL, DECODE, DECODE, PREFILL, DECODE, PREFILL]
SECONDS = [0.040, 0.011, 0.013, 0.025, 0.012, 0.070]
BASE = 3  # (GPU 1's first row)


def core() -> SimpleNamespace:
    """What ``_pace`` reads of a core of 2 GPUs: the per-pass end and start times, the tables'
    first rows, each GPU's schedule's passes, and the passes seen so far."""
    TP = np.zeros((BASE + len(TOKENS), 4))
    TP[BASE:, T.TP_START] = np.arange(len(TOKENS))
    TP[BASE:, T.TP_END] = TP[BASE:, T.TP_START] + SECONDS
    B = np.zeros((2, T.B_SIZE), np.int64)
    B[1, T.B_PASS0] = BASE
    passes = SimpleNamespace(tokens_of=np.array(TOKENS), phase=np.array(PHASES, np.uint8))
    return SimpleNamespace(paces=[{}, {}], pace_seen=[0, 0], B=B, sums=SimpleNamespace(TP=TP),
                           schedules=[None, SimpleNamespace(passes=passes)])  # fmt: skip


def test_no_pace_before_a_pass_ran() -> None:
    assert _Core._pace(core(), 1, 0) is None


def test_a_pass_takes_what_the_last_of_its_size_and_phase_took() -> None:
    c = core()
    pace = _Core._pace(c, 1, 3)  # passes 0, 1, 2 ran
    assert pace is not None
    assert np.isclose(pace(4, PREFILL), SECONDS[0])
    assert np.isclose(pace(1, DECODE), SECONDS[2])  # the last of the two
    # none of that size: the nearest of the phase, scaled up by the tokens where it had fewer
    assert np.isclose(pace(8, PREFILL), SECONDS[0] * 8 / 4)
    assert np.isclose(pace(2, PREFILL), SECONDS[0])  # (never scaled down)
    assert np.isclose(pace(3, DECODE), SECONDS[2] * 3)
    # none of the phase: the nearest of the other, likewise
    c2 = core()
    c2.pace_seen[1], c2.paces[1] = 3, {(1, DECODE): SECONDS[2]}
    assert np.isclose(_Core._pace(c2, 1, 3)(4, PREFILL), SECONDS[2] * 4)


def test_later_passes_add_to_the_pace_and_given_back_ones_count_once_run_again() -> None:
    c = core()
    _Core._pace(c, 1, 3)
    pace = _Core._pace(c, 1, 5)  # passes 3 and 4 ran since
    assert np.isclose(pace(2, PREFILL), SECONDS[3])
    assert np.isclose(pace(1, DECODE), SECONDS[4])
    assert c.pace_seen[1] == 5
    # pass 5 formed ahead and given back before it ran (the stream is back at pass 5): nothing
    # new; once run, its time counts
    assert np.isclose(_Core._pace(c, 1, 5)(8, PREFILL), SECONDS[0] * 8 / 4)
    assert np.isclose(_Core._pace(c, 1, 6)(8, PREFILL), SECONDS[5])
    assert c.paces[0] == {}  # (GPU 0's own)
