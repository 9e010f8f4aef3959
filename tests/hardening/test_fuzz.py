"""Hypothesis campaigns over every input a user writes: configs, hardware profiles, sweep specs
and trace arrays, each drawn valid or broken.

The property is the bad-input contract: a valid input runs (the replay or timing engine on a
tiny committed-shape trace) or is refused with a :class:`~specmd_sim.errors.SpecmdError`; a
broken one is always refused with a SpecmdError (the API) or exit code 2 and one line naming
the broken field (the CLI); nothing else is ever raised, and no example takes longer than the
fork's deadline (:mod:`forked`). Each example runs in a fork of this process, so a hang or a
runaway allocation fails the example instead of the suite.

The campaigns are derandomized (the same examples on every run, so CI is deterministic) and
sized to take a few seconds each on two cores.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import math
import tempfile
import zipfile
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import annotated_types
import numpy as np
import pytest
import yaml
from hardening.forked import (
    Outcome,
    api,
    api_error_problems,
    cli,
    describe,
    user_error_problems,
)
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

# loaded before the first fork, so that each fork starts with them
import specmd_sim.cli
import specmd_sim.engine.replay
import specmd_sim.engine.sim
import specmd_sim.scenario
import specmd_sim.sweep  # noqa: F401
from specmd_sim.hardware import load_profile
from specmd_sim.hardware.schema import Quantity
from specmd_sim.policies import EVICTION, MISS, PREDICTORS, PREFETCH

for _registry in (EVICTION, PREFETCH, PREDICTORS, MISS):
    _registry.kinds()


def campaign(examples: int) -> settings:
    return settings(
        derandomize=True,
        database=None,
        max_examples=examples,
        deadline=timedelta(seconds=15),  # the fork is killed at 10 s first
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        print_blob=False,
    )


def _tiny_trace_bytes(compress: bool = True) -> bytes:
    """A Mixtral-shaped trace of 2 requests x 3 tokens (1 prefill, 2 decode): valid."""
    rng = np.random.default_rng(0)
    experts = np.stack(
        [np.stack([rng.permutation(8)[:2] for _ in range(32)]) for _ in range(6)]
    ).astype(np.int16)
    members = {
        "meta": {"format": "specmd-trace", "version": 1, "model": "mixtral-8x7b",
                 "num_layers": 32, "num_experts": 8, "top_k": 2},
        "experts": experts,
        "request": np.array([0, 0, 0, 1, 1, 1], np.int32),
        "phase": np.array([0, 1, 1, 0, 1, 1], np.uint8),
    }  # fmt: skip
    return npz_bytes(members, compress=compress)


def npz_bytes(members: dict[str, Any], *, compress: bool = True) -> bytes:
    buffer = io.BytesIO()
    method = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
    with zipfile.ZipFile(buffer, "w", method) as zf:
        for name, value in members.items():
            if name == "meta" and not isinstance(value, np.ndarray):
                value = np.array(json.dumps(value))
            with zf.open(f"{name}.npy", "w") as fh:
                np.lib.format.write_array(fh, np.asanyarray(value), allow_pickle=False)
    return buffer.getvalue()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("fuzz") / "tiny.npz"
    path.write_bytes(_tiny_trace_bytes())
    return path


def _base(trace: Path) -> dict[str, Any]:
    return {"trace": str(trace), "workload": {"max_requests": 2}, "cache": {"capacity": 4},
            "predictor": {"kind": "noisy-oracle"}}  # fmt: skip


def _set(data: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    node = data
    for part in path[:-1]:
        if not isinstance(node.get(part), dict):
            node[part] = {}
        node = node[part]
    node[path[-1]] = value


def _run_config(data: dict[str, Any], engine: str) -> Any:
    """In the fork: build the config and run it; a summary of the metrics."""
    import specmd_sim

    config = specmd_sim.build_config(data)
    result = getattr(specmd_sim, engine)(config)
    return {k: result.metrics.get(k) for k in ("accesses", "hit_rate")}


def _tally(broken: bool | None, outcome: Outcome) -> None:
    """An event per example (``--hypothesis-show-statistics``): what was drawn, what came."""
    drawn = {True: "broken", False: "valid", None: "either"}[broken]
    came = outcome.payload[0] if outcome.payload else f"exit {outcome.code}"
    if came == "raised":
        came = "SpecmdError" if outcome.payload[1].is_specmd_error else "other exception"
    event(f"{drawn} -> {came}")


def _no_surprise(outcome: Outcome) -> list[str]:
    """What is wrong with ``outcome`` for an input that may be valid: it must return or raise
    SpecmdError (one line), within the deadline."""
    if outcome.payload and outcome.payload[0] == "returned":
        return []
    return api_error_problems(outcome)


@contextlib.contextmanager
def _tmpdir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="specmd-fuzz-") as folder:
        yield Path(folder)


# --- configs -----------------------------------------------------------------------------------

NAN, INF = float("nan"), float("inf")
JUNK = st.sampled_from([None, True, -1, 1.5, "x", "", [], {}, [1, 2], {"a": 1}, NAN, INF])
KINDS = {"eviction": EVICTION.kinds(), "prefetch": PREFETCH.kinds()}

# path -> (valid values, broken values, the fragment the error must name)
CONFIG_FIELDS: dict[tuple[str, ...], tuple[Any, Any, str]] = {
    ("seed",): (st.integers(0, 2**32), st.sampled_from([-1, True, 1.5, "x", None, NAN, INF]),
                "seed"),
    ("cache", "capacity"): (
        st.sampled_from([2, 4, 8, "4", "5%", "50%", "2GiB", "auto"]),
        st.sampled_from(
            [0, -3, "0%", "101%", "nan", True, 1.5, [], "-1GiB", "1e400B", "5 parsecs"]
        ),
        "capacity",
    ),
    ("cache", "pin_demand_set"): (st.booleans(), st.sampled_from(["maybe", 2, [], None]),
                                  "pin_demand_set"),
    ("eviction",): (
        st.sampled_from(KINDS["eviction"]),
        st.sampled_from(["nope", 5, None, [], {"kind": "lru", "bogus": 1}, {"nokind": 1},
                         "os:system", "no_such_module_xyz:Policy"]),
        "eviction",
    ),
    ("prefetch",): (
        st.sampled_from(KINDS["prefetch"]),
        st.sampled_from(["nope", 7, None, {"kind": "top-k", "k": 0}, {"kind": "top-k",
                         "lookahead": -1}, "sys:exit"]),
        "prefetch",
    ),
    ("predictor", "accuracy"): (st.floats(0, 1), st.sampled_from([-0.1, 1.5, NAN, INF, "high"]),
                                "accuracy"),
    ("workload", "max_requests"): (st.sampled_from([1, 2, None]),
                                   st.sampled_from([0, -1, True, 1.5, "one"]), "max_requests"),
    ("workload", "batch_size"): (st.sampled_from([1, 2]), st.sampled_from([0, -2, True, 2.5]),
                                 "batch_size"),
    ("workload", "prefill_chunk_tokens"): (st.sampled_from([0, 1, 2]),
                                           st.sampled_from([-1, True, 0.5, "all"]),
                                           "prefill_chunk_tokens"),
    ("timing", "chunk_bytes"): (st.sampled_from([None, 2**20, 2**24]),
                                st.sampled_from([0, -1, 4096, True, "1MiB", INF]), "chunk_bytes"),
    ("timing", "record_spans"): (st.booleans(), st.sampled_from(["maybe", 2, None]),
                                 "record_spans"),
    ("parallel", "gpus"): (st.just(1), st.sampled_from([0, True, -1, [], 10**9, ["gpu9"]]),
                           "gpus"),
    ("precision", "hot_fraction"): (st.floats(0, 1), st.sampled_from([-0.5, 2, NAN, "half"]),
                                    "hot_fraction"),
    ("belady_gap",): (st.booleans(), st.sampled_from(["maybe", 3, None]), "belady_gap"),
}  # fmt: skip
SECTIONS = ("cache", "workload", "timing", "memory", "precision", "parallel")


@st.composite
def configs(draw: st.DrawFn, trace: Path) -> tuple[dict[str, Any], list[str]]:
    """A config mapping and the fragments of the fields drawn broken (empty: valid)."""
    data = copy.deepcopy(_base(trace))
    broken: list[str] = []
    paths = draw(st.lists(st.sampled_from(sorted(CONFIG_FIELDS)), max_size=4, unique=True))
    for path in paths:
        valid, bad, fragment = CONFIG_FIELDS[path]
        if draw(st.integers(0, 2)) == 0:  # a third broken
            _set(data, path, draw(bad))
            broken.append(fragment)
        else:
            _set(data, path, draw(valid))
    extra = draw(st.integers(0, 9))
    if extra == 0:  # an unknown key, at the top or in a section
        name = draw(st.from_regex(r"zz[a-z_]{0,6}", fullmatch=True))  # no config field has it
        where = draw(st.sampled_from([(), *((s,) for s in SECTIONS)]))
        _set(data, (*where, name), draw(JUNK))
        broken.append(name)
    elif extra == 1:  # a section replaced by something that is not a mapping
        section = draw(st.sampled_from(SECTIONS))
        data[section] = draw(JUNK.filter(lambda v: not isinstance(v, dict)))
        broken.append(section)
    return data, broken


@given(data=st.data())
@campaign(30)
def test_configs_api(tiny: Path, data: st.DataObject) -> None:
    config, broken = data.draw(configs(tiny))
    engine = data.draw(st.sampled_from(["replay", "simulate"]))
    outcome = api(lambda: _run_config(config, engine))
    if broken:
        problems = api_error_problems(outcome, (broken[0],) if len(broken) == 1 else ())
    else:
        problems = _no_surprise(outcome)
    _tally(bool(broken), outcome)
    assert not problems, f"{'; '.join(problems)} -- {config} -- {describe(outcome)}"


@given(data=st.data())
@campaign(20)
def test_configs_cli(tiny: Path, data: st.DataObject) -> None:
    config, broken = data.draw(configs(tiny))
    command = data.draw(st.sampled_from(["replay", "run"]))
    with _tmpdir() as folder:
        path = folder / "c.yaml"
        path.write_text(yaml.safe_dump(config))
        outcome = cli(command, "--config", path, "--out", folder / "out")
    if broken:
        problems = user_error_problems(outcome, (broken[0],) if len(broken) == 1 else ())
    elif outcome.code == 0:
        problems = []
    else:
        problems = user_error_problems(outcome)
    _tally(bool(broken), outcome)
    assert not problems, f"{'; '.join(problems)} -- {config} -- {describe(outcome)}"


# --- hardware profiles -------------------------------------------------------------------------

PROFILE = load_profile("h100-pcie")
PROFILE_DATA = PROFILE.model_dump(mode="json")


def _bounds(quantity: Quantity) -> tuple[type, dict[str, float]]:
    """The type of a quantity's value and its bounds (gt, ge, lt, le), from the schema."""
    info = type(quantity).model_fields["value"]
    bounds: dict[str, float] = {}
    for item in info.metadata:
        for name in ("gt", "ge", "lt", "le"):
            if isinstance(item, getattr(annotated_types, name.capitalize())):
                bounds[name] = getattr(item, name)
    return info.annotation if info.annotation in (int, float) else float, bounds


def _quantities() -> list[tuple[tuple[Any, ...], float, type, dict[str, float]]]:
    out = []
    for group, owners in (("nodes", PROFILE.nodes), ("links", PROFILE.links)):
        for i, owner in enumerate(owners):
            for name in type(owner).model_fields:
                q = getattr(owner, name)
                if isinstance(q, Quantity):
                    kind, bounds = _bounds(q)
                    out.append(((group, i, name), q.value, kind, bounds))
    return out


QUANTITIES = _quantities()


def _inside(value: float, bounds: dict[str, float]) -> bool:
    low = value > bounds.get("gt", -math.inf) and value >= bounds.get("ge", -math.inf)
    return low and value < bounds.get("lt", math.inf) and value <= bounds.get("le", math.inf)


@st.composite
def profile_mutations(draw: st.DrawFn) -> tuple[dict[str, Any], str | None, bool | None]:
    """A mutated h100-pcie profile, the fragment a refusal must name, and whether it is
    broken (True), valid (False) or may be either (None)."""
    data = copy.deepcopy(PROFILE_DATA)
    how = draw(st.integers(0, 9))
    if how <= 6:  # a number: a valid value, a broken one, or an extreme
        (group, i, name), original, kind, bounds = draw(st.sampled_from(QUANTITIES))
        quantity = data[group][i][name]
        choice = draw(st.sampled_from(["valid", "valid", "broken", "extreme"]))
        if choice == "valid":
            if kind is int:
                lo = int(bounds.get("ge", bounds.get("gt", 0) + 1))
                value: Any = draw(st.integers(lo, max(lo, min(int(bounds.get("le", 8)), 8))))
            else:
                value = original * draw(st.floats(0.5, 2.0)) if original else 0.0
                value = min(value, bounds.get("le", math.inf))
                if not _inside(value, bounds):
                    value = original
            quantity["value"] = value
            return data, name, False
        if choice == "broken":
            candidates: list[Any] = [True, "x", None, NAN, INF, -abs(original) - 1.0, [1.0]]
            if "gt" in bounds:
                candidates.append(bounds["gt"])
            if "le" in bounds:
                candidates.append(bounds["le"] * 2 + 1)
            if kind is int:
                candidates.append(2.5)
            quantity["value"] = draw(st.sampled_from(candidates))
            return data, name, True
        quantity["value"] = draw(st.sampled_from([1e-300, 1e300, original * 1e6, 2**62]))
        return data, None, None
    if how == 7:  # a required field removed
        (group, i, name), *_ = draw(st.sampled_from(QUANTITIES))
        if name in ("dense_fp8_flops",):  # optional
            return data, None, None
        del data[group][i][name]
        return data, name, True
    if how == 8:  # an unknown key in a node or a link
        group = draw(st.sampled_from(["nodes", "links"]))
        i = draw(st.integers(0, len(data[group]) - 1))
        data[group][i]["zz_unknown"] = draw(JUNK)
        return data, "zz_unknown", True
    (group, i, name), *_ = draw(st.sampled_from(QUANTITIES))  # a grade or a source
    if draw(st.booleans()):
        grade = draw(st.sampled_from(["A", "B", "C", "D", "E", "", "a", 1]))
        data[group][i][name]["grade"] = grade
        return data, "grade", grade not in ("A", "B", "C", "D")
    data[group][i][name]["source"] = ""
    return data, "source", True


def _load_profile(path: Path) -> Any:
    from specmd_sim import load_profile

    return load_profile(path).id


def _run_on_profile(path: Path, trace: Path) -> Any:
    from specmd_sim import build_config, simulate

    return simulate(build_config({**_base(trace), "hardware": str(path)})).metrics.get("ttft_s")


@given(mutation=profile_mutations())
@campaign(25)
def test_hardware_profiles(
    tiny: Path, mutation: tuple[dict[str, Any], str | None, bool | None]
) -> None:
    data, fragment, broken = mutation
    with _tmpdir() as folder:
        path = folder / "hw.yaml"
        path.write_text(yaml.safe_dump(data))
        outcome = api(lambda: _load_profile(path))
        if broken:
            problems = api_error_problems(outcome, (str(path), fragment or ""))
        elif broken is False and outcome.payload and outcome.payload[0] != "returned":
            problems = ["a valid profile was refused", *api_error_problems(outcome)]
        else:
            problems = _no_surprise(outcome)
        if not problems and outcome.payload[0] == "returned":  # loaded: it runs or is refused
            outcome = api(lambda: _run_on_profile(path, tiny))
            problems = _no_surprise(outcome)
    _tally(broken, outcome)
    assert not problems, f"{'; '.join(problems)} -- {fragment} -- {describe(outcome)}"


# --- sweep specs -------------------------------------------------------------------------------

AXIS_VALUES: dict[str, Any] = {
    "seed": st.lists(st.integers(0, 50), min_size=1, max_size=3, unique=True),
    "capacity": st.lists(st.sampled_from([2, 4, 8, "5%", "50%"]), min_size=1, max_size=3,
                         unique_by=lambda v: str(v).rstrip("%")),
    "eviction": st.lists(st.sampled_from(KINDS["eviction"]), min_size=1, max_size=3, unique=True),
    "prefetch": st.lists(st.sampled_from(KINDS["prefetch"]), min_size=1, max_size=3, unique=True),
    "predictor.accuracy": st.lists(st.sampled_from([0.0, 0.5, 0.9, 1.0]), min_size=1,
                                   max_size=3, unique=True),
}  # fmt: skip
BROKEN_AXIS_VALUES: dict[str, list[Any]] = {
    "seed": [[], 5, None, [True], [-1], [NAN], ["x"]],
    "capacity": [[], "lru", [0], [True], ["0%"], [NAN]],
    "eviction": [[], "lru", ["nope"], [{"kind": "lru", "x": 1}], [5]],
    "prefetch": [[], ["nope"], [{"kind": "top-k", "k": 0}]],
    "predictor.accuracy": [[], [2.0], [-1], ["high"], [NAN]],
}
BROKEN_AXIS_NAMES = st.sampled_from(["", " seed", "nope", "cache.nope", "workload.x"])


@st.composite
def sweep_specs(draw: st.DrawFn, trace: Path) -> tuple[dict[str, Any], bool]:
    """A sweep spec mapping and whether something in it is broken."""
    spec: dict[str, Any] = {"base": {"trace": str(trace), "workload": {"max_requests": 1}}}
    broken = False
    roll = draw(st.integers(0, 11))
    spec["engine"] = draw(st.sampled_from(["replay", "simulate"]))
    if roll == 0:
        spec["engine"] = draw(st.sampled_from(["warp", 5, None, ""]))
        broken = True
    names = draw(st.lists(st.sampled_from(sorted(AXIS_VALUES)), max_size=2, unique=True))
    axes = {name: draw(AXIS_VALUES[name]) for name in names}
    if roll == 1 and names:
        axes[names[0]] = draw(st.sampled_from(BROKEN_AXIS_VALUES[names[0]]))
        broken = True
    if roll == 2:
        axes[draw(BROKEN_AXIS_NAMES)] = [1]
        broken = True
    spec["axes"] = axes
    if roll in (3, 4):  # a zip group of two axes, of equal or unequal lengths
        left, right = (n for n in ("workload.batch_size", "timing.record_spans"))
        lengths = (2, 2) if roll == 3 else (2, 1)
        spec["zip"] = [{left: [1, 2][: lengths[0]], right: [True, False][: lengths[1]]}]
        broken = roll == 4
    if roll == 5:
        spec["base"]["cachee"] = 1
        broken = True
    if roll == 6:
        spec["set"] = [draw(st.sampled_from(["noequals", "=1", "seed=-1", "nope=1"]))]
        broken = True
    if roll == 7:
        spec["set"] = ["seed=3"]
    if roll == 8:
        spec[draw(st.sampled_from(["axis", "points", "zips"]))] = {}
        broken = True
    if roll == 9:
        spec["name"] = draw(st.sampled_from([5, [], {"a": 1}]))
        broken = True
    return spec, broken


def _sweep(path: Path, out: Path) -> Any:
    """The API on a spec: run_sweep checks the spec whole before it runs a point."""
    from specmd_sim import run_sweep

    return run_sweep(path, out, workers=1)


def _expand_then_run_first(path: Path) -> Any:
    """A spec's points, and the first one run here (a sweep's workers take seconds to start)."""
    import specmd_sim
    from specmd_sim.sweep.grid import expand
    from specmd_sim.sweep.spec import load_spec

    spec = load_spec(path)
    points = expand(spec, f"sweep spec {path}")
    engine = "simulate" if spec.engine == "simulate" else "replay"
    return len(points), getattr(specmd_sim, engine)(points[0].config).metrics.get("accesses")


@given(data=st.data())
@campaign(25)
def test_sweep_specs(tiny: Path, data: st.DataObject) -> None:
    spec, broken = data.draw(sweep_specs(tiny))
    with _tmpdir() as folder:
        path = folder / "spec.yaml"
        path.write_text(yaml.safe_dump(spec))
        if broken:
            outcome = api(lambda: _sweep(path, folder / "api-out"))
            problems = api_error_problems(outcome, (str(path),))
        else:
            outcome = api(lambda: _expand_then_run_first(path))
            problems = _no_surprise(outcome)
        if broken and not problems:  # the command line refuses it too, before any work
            command = cli("sweep", path, "--out", folder / "out", "--workers", "1")
            problems = [f"specmd sweep: {p}" for p in user_error_problems(command, (str(path),))]
            outcome = command
    _tally(broken, outcome)
    assert not problems, f"{'; '.join(problems)} -- {spec} -- {describe(outcome)}"


# --- traces ------------------------------------------------------------------------------------

DTYPES = [np.int16] * 6 + [np.int8, np.int32, np.int64, np.uint8, np.float32, bool]


def _damage(draw: st.DrawFn, members: dict[str, Any], tokens: int, experts: np.ndarray) -> bool:
    """Break (or extend) the other members of a trace at random; whether it broke them."""
    broken = False
    roll = draw(st.integers(0, 29))  # 12 .. 29: left as they are
    if roll == 0:
        members["request"] = np.zeros(tokens + 1, np.int32)
        broken = True
    elif roll == 1:
        members["request"] = np.full(tokens, -1, np.int32)
        broken = broken or tokens > 0
    elif roll == 2:
        members["phase"] = np.full(tokens, 2, np.uint8)
        broken = broken or tokens > 0
    elif roll == 3:
        members["request"] = np.zeros(tokens, np.float64)
        broken = True
    elif roll == 4:
        key = draw(st.sampled_from(["num_experts", "num_layers", "top_k", "version", "format"]))
        members["meta"][key] = draw(st.sampled_from(
            {"version": ["1", None, 2, 0], "format": [None, 5, "other"]}.get(
                key, [True, 0, "8", None, -1])))  # fmt: skip
        broken = True
    elif roll == 5:
        members["meta"]["model"] = "gpt-9"
        broken = True
    elif roll == 6:
        del members[draw(st.sampled_from(["meta", "request", "phase", "experts"]))]
        broken = True
    elif roll == 7 and experts.ndim == 3:
        members["gates"] = np.ones(experts.shape, np.float32)
    elif roll == 8:
        members["gates"] = np.ones((max(tokens, 1), 32, 5), np.float32)
        broken = True
    elif roll == 9:
        members["arrival_s"] = np.full(tokens, draw(st.sampled_from([NAN, INF, -1.0])))
        broken = broken or tokens > 0
    elif roll == 10:
        members["arrival_s"] = np.zeros(tokens)
    elif roll == 11:
        members["meta"] = "{not json"
        broken = True
    return broken


@st.composite
def trace_arrays(draw: st.DrawFn) -> tuple[dict[str, Any], bool, bool]:
    """The members of a trace file, whether it is broken, and whether it is stored
    uncompressed (memory-mapped on load)."""
    broken = False
    tokens = draw(st.sampled_from([1, 3, 3, 3, 3, 3, 3, 0]))
    layers = draw(st.sampled_from([32] * 10 + [31, 1]))
    k = draw(st.sampled_from([2] * 10 + [1, 3]))
    broken |= tokens == 0 or layers != 32 or k != 2
    seed = draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    ids = np.stack([np.stack([rng.permutation(8)[: min(k, 8)] for _ in range(layers)])
                    for _ in range(tokens)]) if tokens else np.zeros((0, layers, k))  # fmt: skip
    dtype = draw(st.sampled_from(DTYPES))
    broken |= np.dtype(dtype).kind not in "iu"
    experts = ids.astype(dtype)
    cell = draw(st.sampled_from([None] * 8 + [-1, -2, 8, 300, 40000]))
    if cell is not None and experts.size and np.dtype(dtype).kind in "iu":
        info = np.iinfo(dtype)
        if info.min <= cell <= info.max:
            experts.flat[draw(st.integers(0, experts.size - 1))] = cell
            broken |= not -1 <= cell <= 7
    if tokens and draw(st.integers(0, 19)) == 0:
        experts = experts.reshape(tokens, -1)  # two dimensions
        broken = True
    members: dict[str, Any] = {
        "meta": {"format": "specmd-trace", "version": 1, "model": "mixtral-8x7b",
                 "num_layers": 32, "num_experts": 8, "top_k": 2},
        "experts": experts,
        "request": np.zeros(tokens, np.int32),
        "phase": np.ones(tokens, np.uint8),
    }  # fmt: skip
    broken |= _damage(draw, members, tokens, experts)
    return members, broken, draw(st.booleans())


def _load_then_replay(path: Path) -> Any:
    from specmd_sim import build_config, load_trace, replay

    trace = load_trace(path)
    config = build_config({"trace": str(path), "cache": {"capacity": 4}})
    return trace.num_tokens, replay(config).metrics.get("accesses")


def _make_trace(members: dict[str, Any]) -> Any:
    from specmd_sim import make_trace

    meta = members.get("meta") if isinstance(members.get("meta"), dict) else {}
    return make_trace(
        members.get("experts"),
        model=str(meta.get("model", "mixtral-8x7b")),
        num_experts=meta.get("num_experts", 8),
        request=members.get("request"),
        phase=members.get("phase"),
        gates=members.get("gates"),
        arrival_s=members.get("arrival_s"),
    ).num_tokens


@given(drawn=trace_arrays())
@campaign(30)
def test_trace_arrays(drawn: tuple[dict[str, Any], bool, bool]) -> None:
    members, broken, stored = drawn
    with _tmpdir() as folder:
        path = folder / "t.npz"
        path.write_bytes(npz_bytes(members, compress=not stored))
        outcome = api(lambda: _load_then_replay(path))
    problems = api_error_problems(outcome, (str(path),)) if broken else _no_surprise(outcome)
    if "experts" in members:  # the same arrays given to the API directly
        made = api(lambda: _make_trace(members))
        problems += [f"make_trace: {p}" for p in _no_surprise(made)]
    _tally(broken, outcome)
    assert not problems, f"{'; '.join(problems)} -- {describe(outcome)}"


@given(
    keep=st.one_of(st.just(1.0), st.floats(0, 1, exclude_max=True)),
    flips=st.lists(st.tuples(st.integers(0, 10**6), st.integers(1, 255)), max_size=3),
    stored=st.booleans(),
)
@campaign(20)
def test_damaged_trace_files(keep: float, flips: list[tuple[int, int]], stored: bool) -> None:
    """A valid file cut short is refused; one with flipped bytes is refused or still valid."""
    raw = bytearray(_tiny_trace_bytes(compress=not stored))
    for at, mask in flips:
        raw[at % len(raw)] ^= mask
    cut = int(keep * len(raw))
    truncated = cut < len(raw)
    with _tmpdir() as folder:
        path = folder / "t.npz"
        path.write_bytes(bytes(raw[:cut]))
        outcome = api(lambda: _load_then_replay(path))
    problems = api_error_problems(outcome, (str(path),)) if truncated else _no_surprise(outcome)
    _tally(True if truncated else None, outcome)
    assert not problems, f"{'; '.join(problems)} -- {describe(outcome)}"
