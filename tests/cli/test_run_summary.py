"""The run summary: late hits explained in one line when they outnumber hits, times summed over
GPUs labelled as sums, rows for the Belady gap and the mechanisms that resolve or bypass
misses when a run has them, and the path the engine took (and why, where it fell back)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import pytest
from typer.testing import CliRunner

from specmd_sim.cli import app
from specmd_sim.cli.notes import (
    dropped_prefetch_note,
    late_hit_note,
    layer_quota_note,
    overflow_note,
    preemption_note,
    prefetch_eviction_note,
    setup_line,
    small_cache_note,
    whole_model_note,
)
from specmd_sim.engine import jit
from specmd_sim.metrics import METRICS


def test_late_hits_are_explained_when_they_dominate(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app, ["run", "--set", "workload.max_requests=1", "--out", str(tmp_path / "r")],
        catch_exceptions=False,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "of accesses were late hits" in text and "replay, where transfers take no time" in text


def test_no_note_when_hits_dominate_or_in_replay() -> None:
    assert late_hit_note({"late_hits": 10, "hits": 90, "accesses": 120}) is None
    assert late_hit_note({"hits": 5, "accesses": 120}) is None  # replay has no late hits
    note = late_hit_note({"late_hits": 80, "hits": 10, "accesses": 100})
    assert note is not None and "80.0% of accesses" in note and "here: 90.0%)" in note


def _trace(write_trace) -> str:
    """Two requests of 4 tokens on OLMoE's shape (16 layers, 8 of 64 experts), seeded."""
    rng = np.random.default_rng(0)
    experts = np.stack([[rng.choice(64, 8, replace=False) for _ in range(16)]
                        for _ in range(8)]).astype(np.int16)  # fmt: skip
    request = np.repeat(np.arange(2, dtype=np.int32), 4)
    return str(write_trace(experts, "olmoe-1b-7b", 64, request=request))


def _summary(folder: Path, *args: str) -> tuple[str, dict[str, Any]]:
    """What ``specmd ARGS --out FOLDER`` prints, and the metrics of the run it wrote."""
    result = CliRunner().invoke(
        app, [*args, "--out", str(folder)], env={"COLUMNS": "200"}, catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    return result.output, json.loads((folder / "result.json").read_text())["metrics"]


def _row(text: str, label: str) -> str:
    """The value cell of the summary row ``label``."""
    for line in text.splitlines():
        cells = [c.strip() for c in line.split("│")]
        if len(cells) > 2 and cells[1] == label:
            return cells[2]
    raise AssertionError(f"no row {label!r} in:\n{text}")


def test_times_summed_over_gpus_say_so(tmp_path: Path, write_trace) -> None:
    """Two GPUs stall for longer than the makespan: the row says it is a sum."""
    args = ("run", "--trace", _trace(write_trace), "--cache", "16", "--set",
            "timing.record_spans=false")  # fmt: skip
    text, m = _summary(tmp_path / "two", *args, "--hardware", "hgx-h100-8gpu", "--set",
                       "parallel.gpus=2")  # fmt: skip
    assert m["stall_s"] > m["makespan_s"]
    assert _row(text, "stall (sum over 2 GPUs)") == METRICS["stall_s"].format(m["stall_s"])
    assert _row(text, "transfer hidden behind compute (sum over 2 GPUs)") == (
        METRICS["overlap_s"].format(m["overlap_s"])
    )
    single, _ = _summary(tmp_path / "one", *args)
    assert _row(single, "stall") and "sum over" not in single


def test_belady_gap_has_a_row(tmp_path: Path, write_trace) -> None:
    text, m = _summary(tmp_path / "r", "replay", "--trace", _trace(write_trace), "--cache", "16",
                       "--set", "belady_gap=true")  # fmt: skip
    assert _row(text, "offline optimum / its hit rate / misses above it") == (
        f"{m['belady_reference']} / {m['belady_hit_rate']:.2%} / {m['belady_gap_misses']:,}"
    )


_MECHANISMS = {
    "bypassed": "bypassed fetches",
    "activations_substituted": "activations substituted",
    "activations_cpu": "activations on the CPU",
    "activations_dropped": "activations dropped",
}


@pytest.mark.parametrize(
    ("options", "used"),
    [
        (("--eviction", "static-hot", "--set", "miss.kind=substitute"),
         {"bypassed", "activations_substituted"}),
        (("--set", "miss.kind=cpu-execute"), {"activations_cpu"}),
        (("--set", "miss.kind=drop"), {"activations_dropped"}),
    ],
)  # fmt: skip
def test_misses_bypassed_or_resolved_otherwise_are_counted(
    tmp_path: Path, write_trace, options: tuple[str, ...], used: set[str]
) -> None:
    """A row for each mechanism a run used, none for the others."""
    text, m = _summary(tmp_path / "r", "replay", "--trace", _trace(write_trace), "--cache", "16",
                       *options)  # fmt: skip
    for name, label in _MECHANISMS.items():
        if name in used:
            assert m[name] > 0 and _row(text, label) == f"{m[name]:,}"
        else:
            assert m[name] == 0 and label not in text


def test_the_engine_path_is_named_and_a_fallback_says_why(tmp_path: Path, write_trace) -> None:
    """One line under the table: the compiled path, or the Python one with its cost and why."""
    args = ("--trace", _trace(write_trace), "--cache", "16", "--eviction")
    with mock.patch.object(jit, "available", return_value=True):  # (interpreted without numba)
        covered, _ = _summary(tmp_path / "lru", "replay", *args, "lru")
        timed, _ = _summary(tmp_path / "timed", "run", *args, "lru")
    assert "\nengine path: compiled replay\n" in covered
    assert "\nengine path: compiled timing core\n" in timed
    text, _ = _summary(tmp_path / "random", "replay", *args, "random")
    fallback = (
        "Python layer step, ~100x slower than the compiled replay (why: eviction 'random' has no "
        "compiled form)"
    )
    assert f"\nengine path: {fallback}\n" in text


def test_the_summary_names_the_setup_in_words(tmp_path: Path) -> None:
    """The settings that set the headline numbers come first: the default run's prefill mode
    (the whole prompt), predictor (learned online), runtime, cache and machine, GPU and host; an
    offline predictor is marked as one."""
    result = CliRunner().invoke(
        app, ["run", "--set", "workload.max_requests=1", "--out", str(tmp_path / "r")],
        catch_exceptions=False,
    )  # fmt: skip
    first = " ".join(result.output.split("simulate:")[0].split())
    assert first.startswith("setup: 1 request(s)")
    assert "prefill the whole prompt in one pass" in first
    assert "predictor transition (learned online from the run)" in first
    assert "runtime fused-kernels" in first and "cache 5% = 51 expert slots" in first
    assert "machine NVIDIA H100 PCIe 80GB + 2x Xeon 8480+" in first
    assert "(host: 2x Intel Xeon Platinum 8480+ (DDR5-4800, 16 channels))" in first
    result = CliRunner().invoke(
        app, ["run", "--set", "workload.max_requests=1", "--set", "predictor.kind=noisy-oracle",
              "--set", "workload.prefill_chunk_tokens=1", "--out", str(tmp_path / "o")],
        catch_exceptions=False,
    )  # fmt: skip
    first = " ".join(result.output.split("simulate:")[0].split())
    assert "prefill token by token" in first and "predictor noisy-oracle (offline" in first
    fitted = {"predictor": {"kind": "popularity", "fit_on": {"requests": [0]},
                            "learn_online": True}}  # fmt: skip
    assert "predictor popularity (fitted on other requests)" in setup_line(fitted, {})
    assert "predictor trace;" in setup_line({"predictor": {"kind": "trace"}}, {})


def test_the_setup_line_says_how_steps_are_formed_under_arrivals() -> None:
    """Poisson or recorded arrivals: their rate, and with batches whether steps are formed as
    requests arrive (online) or fixed before the run; nothing of it in a closed loop."""
    poisson = {"arrivals": "poisson", "arrival_rate_per_s": 2.5, "batch_size": 8}
    line = setup_line({"workload": poisson}, {})
    assert "; arrivals poisson at 2.5/s, batch 8, steps formed as requests arrive; " in line
    fixed = setup_line({"workload": {**poisson, "schedule": "fixed"}}, {})
    assert "steps fixed before the run (a step waits for requests not yet arrived)" in fixed
    assert "; arrivals trace; prefill" in setup_line({"workload": {"arrivals": "trace"}}, {})
    assert "arrivals" not in setup_line({"workload": {"batch_size": 8}}, {})


def test_a_cache_smaller_than_a_pass_says_so() -> None:
    assert small_cache_note({"capacity_slots": 51, "pass_demand_max": 128}) is not None
    assert "holds 51 experts and one pass demands up to 128" in str(
        small_cache_note({"capacity_slots": 51, "pass_demand_max": 128})
    )
    assert small_cache_note({"capacity_slots": 128, "pass_demand_max": 128}) is None


def test_per_layer_quotas_past_the_cache_say_so() -> None:
    """slots_per_layer x layers above the cache's slots: the quota does not bind (lru's
    victims go first), which the run says, naming the cache that mixtral-offloading has."""
    config = {"eviction": {"kind": "per-layer-lru", "slots_per_layer": 100}}
    inputs = {"num_layers": 16, "capacity_slots": 51}
    note = layer_quota_note(config, inputs)
    assert note is not None and "100 slots per layer, 1,600 over the 16 layers" in note
    assert "the cache holds 51" in note and "(--cache 1600)" in note
    assert layer_quota_note(config, {**inputs, "capacity_slots": 1600}) is None
    default = {"eviction": {"kind": "per-layer-lru", "slots_per_layer": None}}
    assert layer_quota_note(default, inputs) is None  # (cache slots // layers: it fits)
    assert layer_quota_note({"eviction": {"kind": "lru"}}, inputs) is None


def test_a_whole_prompt_larger_than_the_cache_runs_and_says_so(tmp_path: Path) -> None:
    """The issue's case: a 256-token OLMoE prompt prefilled in one pass beside a 5% cache (51
    slots; a layer demands up to all 64 experts): what the pinned demand set leaves no room for
    is streamed past the cache, counted and noted, and nothing else changes in the counts."""
    from specmd_sim.traces import save_trace
    from specmd_sim.traces.synthetic import PRESETS, generate

    params = PRESETS["olmoe"].model_copy(
        update={"num_requests": 1, "prompt_tokens": 256, "decode_tokens": 4}
    )
    trace = save_trace(generate(params, 0), tmp_path / "long.npz")
    text, m = _summary(tmp_path / "r", "run", "--trace", str(trace), "--cache", "5%",
                       "--set", "workload.prefill_chunk_tokens=0")  # fmt: skip
    assert m["overflowed"] > 0 and m["hits"] + m["late_hits"] + m["misses"] == m["accesses"]
    line = " ".join(text.split())
    assert "overflow fetches" in line and "streamed past the cache" in line
    assert "prefill the whole prompt in one pass" in line
    note = overflow_note({"overflowed": 416}, {"capacity_slots": 51, "layer_demand_max": 64})
    assert note is not None and "416 demand fetches" in note and "up to 64" in note
    assert overflow_note({"overflowed": 0}, {"capacity_slots": 51}) is None


def test_an_overflow_where_the_demand_fits_names_the_eviction_policy(monkeypatch) -> None:
    """Where every layer's demand set fits the cache, an overflow means the eviction policy chose
    no victim among the unpinned experts (a plug-in's None, a resident set it keeps), or the
    cache shrank as the KV cache grew: the note says so rather than blaming the cache's size.
    A policy that never evicts overflows at once (every demand fetch once the cache is full)."""
    from specmd_sim import build_config, simulate
    from specmd_sim.policies import EVICTION
    from specmd_sim.policies.eviction.lru import LRUEviction

    inputs = {"capacity_slots": 16, "layer_demand_max": 2}
    config = {"eviction": {"kind": "keeper"}, "workload": {"kv_cache": "reserve"}}
    note = overflow_note({"overflowed": 40}, inputs, config)
    assert note is not None and "40 demand fetches" in note and "up to 2 experts" in note
    assert "the eviction policy (keeper) chose no victim among the experts not pinned" in note
    assert "KV cache grew" not in note and "larger cache" not in note
    shrinking = {**config, "workload": {"kv_cache": "evict"}}
    shrank = overflow_note({"overflowed": 1}, inputs, shrinking)
    assert shrank is not None and "or the cache shrank as the KV cache grew" in shrank

    class Keeper(LRUEviction):  # (lru's kind, in this test's registry)
        def choose_victim(self, evictable, incoming):
            return None

    EVICTION.kinds()  # (the bundled plug-ins loaded first)
    monkeypatch.setitem(EVICTION._entries, "lru", Keeper)
    run = simulate(build_config({"trace": "mixtral-synthetic", "cache": {"capacity": 16},
                                 "workload": {"max_requests": 1}, "eviction": "lru"}))  # fmt: skip
    assert run.metrics["overflowed"] > 0 and run.inputs["layer_demand_max"] <= 16
    said = overflow_note(run.metrics, run.inputs, {"eviction": {"kind": "lru"}})
    assert said is not None and "the eviction policy (lru) chose no victim" in said


def test_prefetches_that_make_most_evictions_are_named(tmp_path: Path) -> None:
    """The issue's case: LRU at 64 slots with top-k prefetching (a hit rate far below the same
    run's without prefetching): the note names the evictions the prefetches made."""
    args = ("run", "--trace", "mixtral-synthetic", "--eviction", "lru", "--cache", "64",
            "--set", "workload.max_requests=1")  # fmt: skip
    text, m = _summary(tmp_path / "pf", *args, "--prefetch", "top-k")
    _, without = _summary(tmp_path / "none", *args, "--prefetch", "none")
    assert m["evictions_prefetch"] > m["evictions"] / 2 and without["evictions_prefetch"] == 0
    line = " ".join(text.split())
    assert f"prefetches made {m['evictions_prefetch']:,} of the {m['evictions']:,}" in line
    assert "--prefetch none" in line
    assert prefetch_eviction_note({"evictions_prefetch": 10, "evictions": 30}) is None
    assert prefetch_eviction_note({"evictions": 30}) is None


def test_a_model_that_fits_whole_says_so() -> None:
    fits = {"routed_bytes": 12 * 2**30, "budget_available_bytes": 72 * 2**30,
            "capacity_bytes": 2**29}  # fmt: skip
    note = whole_model_note(fits)
    assert note is not None and "--cache auto holds them all" in note and "12 GiB" in note
    assert whole_model_note({**fits, "capacity_bytes": 12 * 2**30}) is None  # all cached
    assert whole_model_note({**fits, "budget_available_bytes": 11 * 2**30}) is None  # too big


def test_prefetches_a_policy_refuses_are_named() -> None:
    config = {"eviction": {"kind": "static-hot"}}
    note = dropped_prefetch_note({"prefetch_dropped": 59_477, "prefetch_issued": 0}, config)
    assert note is not None and "59,477 prefetch requests were dropped, 0 issued" in note
    assert "static-hot" in note
    assert dropped_prefetch_note({"prefetch_dropped": 3, "prefetch_issued": 900}, config) is None


def test_a_run_with_static_hot_and_a_prefetcher_explains_itself(tmp_path: Path) -> None:
    """The issue's case: static-hot with the default prefetcher, Mixtral on a GPU that could
    hold it all: the eviction is marked offline, and the dropped prefetches, the small cache
    and the model that would fit are each one line."""
    result = CliRunner().invoke(
        app, ["run", "--trace", "mixtral-synthetic", "--hardware", "h200", "--eviction",
              "static-hot", "--set", "workload.max_requests=1", "--out", str(tmp_path / "r")],
        catch_exceptions=False,
    )  # fmt: skip
    text = " ".join(result.output.split())
    assert "static-hot (offline) + top-k" in text
    for fragment in ("prefetch requests were dropped", "one pass demands up to 256",
                     "--cache auto holds them all"):  # fmt: skip
        assert fragment in text, fragment


def test_the_setup_says_the_host_where_the_machines_name_does_not() -> None:
    """The host the run's host-side numbers assume (#34 item 2): named after the machine unless
    the machine's name already holds it."""
    config = {"trace": "t", "runtime": "r", "workload": {}, "predictor": {"kind": "trace"}}
    line = setup_line(config, {"hardware_name": "RTX 3090 + desktop",
                               "host_name": "Ryzen 9 5950X (assumed)"})  # fmt: skip
    assert line.endswith("machine RTX 3090 + desktop (host: Ryzen 9 5950X (assumed))")
    line = setup_line(config, {"hardware_name": "A100 + EPYC 7742", "host_name": "EPYC 7742"})
    assert line.endswith("machine A100 + EPYC 7742")
    assert setup_line(config, {"hardware_name": "A100"}).endswith("machine A100")  # older results


def test_preemptions_get_a_note() -> None:
    assert preemption_note({"preemptions": 0}) is None and preemption_note({}) is None
    note = preemption_note({"preemptions": 3})
    assert note is not None and note.startswith("note: 3 preemption(s): ")
    assert "\n" not in note
