"""The online view: the run's history follows the cache's position and refuses the future."""

from __future__ import annotations

import numpy as np
import pytest
from support import context

from specmd_sim.policies.context import FutureAccessError, PassInfo

# 2 passes x 2 layers x 4 experts; keys are flat ids layer * 4 + expert
SETS = [[1, 0], [6], [2], [4, 7]]


def test_the_history_serves_each_demand_set_from_its_router_decision_on() -> None:
    cache = context.cache(
        "lru", slots=4, layers=2, demand=context.access_sequence(SETS, 2), requests=[5, 6]
    )
    history = cache.policy.ctx.history
    assert history.now == (-1, -1)
    with pytest.raises(FutureAccessError, match="the pass table of pass 0, layer -1"):
        history.pass_info(0)
    cache.begin_pass(0)
    assert history.now == (0, -1)
    assert history.pass_info(0) == PassInfo(
        request=5, phase=1, tokens=1, context_end=1, attended=1, kv_tokens=1
    )
    with pytest.raises(FutureAccessError, match="the demand set of pass 0, layer 0"):
        history.demand_set(0, 0)
    cache.begin_layer(0)
    assert history.keys_of(0, 0).tolist() == [1, 0]
    with pytest.raises(FutureAccessError, match="the run is at pass 0, layer 0"):
        history.keys_of(0, 1)
    cache.begin_layer(1)
    cache.begin_pass(1)
    with pytest.raises(FutureAccessError):
        history.demand_set(1, 0)
    cache.begin_layer(0)
    chosen = history.demand_set(1, 0)
    assert chosen.keys.tolist() == [2] and chosen.tokens.tolist() == [1]
    assert history.demand_set(0, 1).keys.tolist() == [6]  # the past stays readable
    with pytest.raises(FutureAccessError):
        history.pass_info(2)


def test_recorded_predictions_are_served_from_the_layer_they_were_made_at() -> None:
    # D = 1: pred[0, p, t] was made at layer t - 1 for layer t
    pred = np.arange(2 * 2 * 4, dtype=np.float16).reshape(1, 2, 2, 4)
    cache = context.cache(
        "lru", slots=4, layers=2, demand=context.access_sequence(SETS, 2), pred_scores=pred
    )
    history = cache.policy.ctx.history
    assert history.records_scores
    cache.begin_pass(0)
    # made at layer -1 (before the pass's first layer) for layer 0: known at the pass start
    assert history.recorded_scores(0, -1, 0).tolist() == [pred[0, 0, 0].tolist()]
    with pytest.raises(FutureAccessError, match="a recorded prediction of pass 0, layer 0"):
        history.recorded_scores(0, 0, 1)
    cache.begin_layer(0)
    assert history.recorded_scores(0, 0, 1).tolist() == [pred[0, 0, 1].tolist()]
    assert history.recorded_scores(0, -1, 1) is None  # two layers ahead: not recorded (D = 1)


def test_the_offline_view_holds_the_whole_access_sequence() -> None:
    run = context.views(layers=2, demand=context.access_sequence(SETS, 2))
    assert run.offline.demand.keys_of(1, 1).tolist() == [4, 7]  # before the run
    assert run.offline.history is run.online.history and run.offline.rng is run.online.rng
    assert run.view(offline=True) is run.offline and run.view(offline=False) is run.online
