"""The policy-ranking rule of ``specmd validate real``: ties the simulator predicts must be ties
on the machine; other pairs must keep their direction unless both are within the noise."""

from __future__ import annotations

from specmd_sim.validate.real import _rankings


def rows(*pairs: tuple[str, float, float]) -> list[dict]:
    base = {"bandwidth": 1e9, "mode": "decode", "capacity": "5%", "prefetch": "none"}
    return [{**base, "policy": p, "simulated_tpot_s": s, "measured_tpot_s": m}
            for p, s, m in pairs]  # fmt: skip


def only(result: dict[str, bool]) -> bool:
    (value,) = result.values()
    return value


def test_same_decisions_are_a_tie_whatever_the_noise_order() -> None:
    # lru and touch-ordered least-stale decide the same: equal simulated times
    assert only(_rankings(rows(("lru", 0.220, 0.2292), ("ls", 0.220, 0.2290))))


def test_a_predicted_tie_that_measures_apart_is_lost() -> None:
    assert not only(_rankings(rows(("lru", 0.220, 0.229), ("ls", 0.220, 0.200))))


def test_a_predicted_difference_must_keep_its_direction() -> None:
    assert only(_rankings(rows(("lru", 0.220, 0.229), ("ls-layer", 0.190, 0.206))))
    assert not only(_rankings(rows(("lru", 0.220, 0.229), ("ls-layer", 0.190, 0.240))))


def test_small_differences_within_the_noise_pass_either_way() -> None:
    assert only(_rankings(rows(("a", 0.200, 0.2000), ("b", 0.203, 0.1990))))


def test_groups_split_by_everything_but_the_policy() -> None:
    data = rows(("lru", 0.2, 0.2), ("ls", 0.2, 0.2))
    data += [{**r, "capacity": "10%"} for r in data]
    assert len(_rankings(data)) == 2
