"""SimConfig: everything that defines a run, as a frozen pydantic model.

Building a config has no side effects: ids and paths (model, hardware, trace) are only
strings here; :func:`specmd_sim.scenario.build_scenario` loads them. Policy sections are
``{kind: ..., **params}`` mappings validated against the plug-in registries, so a new plug-in
brings its own config class. Every field has a description and, where it has one, a unit.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any, Literal

from pydantic import (
    Field,
    SerializeAsAny,
    ValidationError,
    field_validator,
    model_validator,
)

from specmd_sim.errors import SpecmdError, from_validation_error, short_repr
from specmd_sim.hardware.loader import YamlSyntaxError, parse_yaml
from specmd_sim.models.spec import Dtype, KvDtype
from specmd_sim.policies.registry import (
    EVICTION,
    MISS,
    PREDICTORS,
    PREFETCH,
    PluginConfig,
    load_plugins,
)
from specmd_sim.schema_base import InputModel as _Frozen
from specmd_sim.units import parse_bytes

_PERCENT = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*%\s*$")
_NUMBER = re.compile(r"^\s*[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?\s*$")  # (no unit)


def capacity_spec(value: object) -> str | int:
    """A cache capacity: ``'auto'`` (what the GPU memory budget leaves) or a size spec.
    Raises ValueError, whose message is ``expected 'auto' or ..., got ...``."""
    if isinstance(value, str) and value.strip() == "auto":
        return "auto"
    try:
        return _size_spec(value)
    except ValueError as exc:
        raise ValueError(str(exc).replace("expected ", "expected 'auto' or ", 1)) from None


def _size_spec(value: object) -> str | int:
    """Validate a size given as a percentage of routed-expert bytes, a count or bytes."""
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise ValueError(
            f"expected a percentage ('5%'), a slot count (51) or a size ('0.6GiB'), got {value!r}"
        )
    if isinstance(value, int):
        if value < 1:
            raise ValueError(f"expected at least 1 expert slot, got {value}")
        return value
    text = value.strip()
    if text.isdigit():
        return _size_spec(int(text))
    match = _PERCENT.match(text)
    if match:
        if not 0 < float(match.group(1)) <= 100:
            raise ValueError(f"expected a percentage in (0, 100], got {value!r}")
        return text
    if _NUMBER.match(text):  # (a count is whole; bytes name their unit: '5e9' is neither)
        raise ValueError(
            f"expected a whole number of expert slots (51), a percentage ('5%') or a size with "
            f"its unit ('0.6GiB', '650e6B'), got {value!r}"
        )
    size = parse_bytes(text)
    if size <= 0:
        raise ValueError(f"expected a positive size, got {value!r}")
    return text


def resolve_size(spec: str | int, expert_bytes: int, routed_bytes: int) -> int:
    """Bytes of a size spec: ``'5%'`` of ``routed_bytes``, N experts of ``expert_bytes``, or a
    size in bytes."""
    if isinstance(spec, int):
        return spec * expert_bytes
    match = _PERCENT.match(spec)
    if match:
        return int(float(match.group(1)) / 100.0 * routed_bytes)
    return parse_bytes(spec)


class CacheConfig(_Frozen):
    capacity: str | int = Field(
        default="5%",
        description=(
            "GPU expert-cache capacity, per GPU: a percentage of all routed-expert bytes ('5%', "
            "SpecMD's convention), a number of expert slots (51), bytes ('0.6GiB', '650e6B'), "
            "or 'auto' = all the GPU memory budget leaves (HBM minus non-expert weights, KV "
            "cache and the runtime's workspace)."
        ),
    )
    pin_demand_set: bool = Field(
        default=True,
        description=(
            "Pin a layer's demand set from its router decision until its experts ran. False "
            "processes accesses strictly one at a time (classic cache-simulator semantics)."
        ),
    )

    _check_capacity = field_validator("capacity", mode="before")(capacity_spec)

    def capacity_bytes(self, expert_bytes: int, routed_bytes: int, budget: int) -> int:
        """Resolve the capacity against a model's expert sizes; ``auto`` = ``budget`` bytes
        rounded down to whole expert slots."""
        if self.capacity == "auto":
            return max(budget, 0) // expert_bytes * expert_bytes
        return resolve_size(self.capacity, expert_bytes, routed_bytes)


class DramCacheConfig(_Frozen):
    """Host DRAM as a cache of the NVMe-resident experts (``docs/hardware.md``, "Two-level
    cache"): its own eviction, prefetch and predictor plug-ins, configured as the top-level ones."""

    eviction: SerializeAsAny[PluginConfig] = Field(
        default_factory=lambda: EVICTION.parse_config({"kind": "lru"}),
        description="Eviction policy of the DRAM cache: {kind: ..., params}.",
    )
    prefetch: SerializeAsAny[PluginConfig] = Field(
        default_factory=lambda: PREFETCH.parse_config({"kind": "none"}),
        description=(
            "Prefetch policy of the DRAM cache (NVMe -> DRAM, planned at each router decision "
            "for its lookahead layers): {kind: ..., params}."
        ),
    )
    predictor: SerializeAsAny[PluginConfig] | None = Field(
        default=None,
        description="Predictor of the DRAM prefetcher: {kind: ..., params}; null = the run's.",
    )
    warm: bool = Field(
        default=True,
        description=(
            "Start with DRAM holding what the static tier would (memory.placement order, as "
            "many as memory.dram_capacity holds); false = start empty."
        ),
    )

    @field_validator("eviction", mode="before")
    @classmethod
    def _eviction(cls, value: Any) -> PluginConfig:
        return _nested(EVICTION, value, "memory.dram_cache.")

    @field_validator("prefetch", mode="before")
    @classmethod
    def _prefetch(cls, value: Any) -> PluginConfig:
        return _nested(PREFETCH, value, "memory.dram_cache.")

    @field_validator("predictor", mode="before")
    @classmethod
    def _predictor(cls, value: Any) -> PluginConfig | None:
        return None if value is None else _nested(PREDICTORS, value, "memory.dram_cache.")


def _nested(registry: Any, value: Any, prefix: str) -> PluginConfig:
    """A plug-in section below the top level: its errors name the section's full path."""
    try:
        parsed: PluginConfig = registry.parse_config(value)
    except SpecmdError as exc:  # its kind kept (an UnloadedPlugin stays one)
        raise type(exc)(f"{prefix}{exc}") from None
    return parsed


class MemoryConfig(_Frozen):
    dram_capacity: str | int | None = Field(
        default=None,
        description=(
            "Routed-expert bytes stored in host DRAM, the rest on the profile's NVMe drive: a "
            "percentage of all routed-expert bytes, a number of experts (of the model's expert "
            "size) or bytes. None = as many as the host's DRAM holds (all of them when they fit). "
            "With dram_cache: the DRAM cache's capacity."
        ),
    )
    placement: Literal["hot-first", "layer-order"] = Field(
        default="hot-first",
        description=(
            "Which experts DRAM keeps: 'hot-first' = the most often routed in the trace (an "
            "offline profile), 'layer-order' = earlier layers first."
        ),
    )
    nvme: str | None = Field(
        default=None, description="NVMe node id of the profile; None = its first NVMe node."
    )
    dram_cache: DramCacheConfig | None = Field(
        default=None,
        description=(
            "Make DRAM a dynamic cache of experts stored on the NVMe drive (every expert lives "
            "there; the GPU cache is filled from DRAM). null = DRAM is a static tier."
        ),
    )

    @field_validator("dram_capacity", mode="before")
    @classmethod
    def _check_dram(cls, value: object) -> str | int | None:
        return None if value is None else _size_spec(value)


class PrecisionConfig(_Frozen):
    cold_dtype: Dtype | None = Field(
        default=None,
        description=(
            "Precision of the experts outside each layer's hot set (bytes and compute follow "
            "it); None = every expert at the model's expert precision."
        ),
    )
    hot_fraction: float = Field(
        default=0.25,
        ge=0,
        le=1,
        description=(
            "Per layer, the fraction of experts (most often routed in the trace first) kept at "
            "the model's expert precision."
        ),
    )


class ParallelConfig(_Frozen):
    gpus: int | list[str] = Field(
        default=1,
        description=(
            "GPUs used: a number N (the profile's first N GPU nodes) or a list of GPU node ids "
            "(e.g. [gpu0, gpu2]: two GPUs behind different PCIe switches)."
        ),
    )
    mode: Literal["replicas", "expert-sharded"] = Field(
        default="replicas",
        description=(
            "'replicas' = each GPU serves its own requests (routed as parallel.router says) with "
            "its own expert cache, all fetching from host memory over shared links; "
            "'expert-sharded' = as replicas, but the routed experts are also sharded across the "
            "GPUs' HBM (contiguous blocks of each layer's experts): a GPU's own shard is always "
            "resident, and a missing expert comes from its owner GPU over the GPU-GPU fabric."
        ),
    )

    router: Literal["round-robin", "least-loaded"] = Field(
        default="round-robin",
        description=(
            "Which GPU serves each request, when several do: 'round-robin' = the n-th request "
            "in arrival order goes to GPU n mod N; 'least-loaded' = each request, as it "
            "arrives, goes to the GPU with the fewest unfinished requests (waiting or "
            "running), ties to the first from a start that moves one GPU on per request, as "
            "vLLM's data-parallel front end routes (DPLBAsyncMPClient.get_core_engine_for_"
            "request, vllm/v1/engine/core_client.py). Under arrivals other than closed-loop, "
            "the router runs inside the timing engine (workload.schedule: online)."
        ),
    )

    @field_validator("gpus", mode="before")
    @classmethod
    def _check_gpus(cls, value: object) -> object:
        if isinstance(value, bool):
            raise ValueError(f"expected a number of GPUs or a list of GPU ids, got {value!r}")
        if isinstance(value, int) and value < 1:
            raise ValueError(f"expected at least 1 GPU, got {value}")
        if isinstance(value, list) and (not value or len(set(map(repr, value))) != len(value)):
            raise ValueError(f"expected a non-empty list of distinct GPU ids, got {value}")
        return value

    @property
    def count(self) -> int:
        """How many GPUs the run uses."""
        return self.gpus if isinstance(self.gpus, int) else len(self.gpus)


# Tokens in one pass and requests in one batch: 2**31, beyond any context window or batch, so
# that counts the engines derive from them stay within the int64 arrays that hold them.
MAX_TOKENS = 1 << 31


class WorkloadConfig(_Frozen):
    prefill_chunk_tokens: int = Field(
        default=0,
        ge=0,
        le=MAX_TOKENS,
        description=(
            "Prompt tokens per prefill pass: 0 = the whole prompt in one pass (the default, as "
            "offloading runtimes and servers prefill; what a layer's demand set leaves no room "
            "for in the cache is streamed past it, counted as overflowed), N = chunks of N "
            "tokens (vLLM-style chunked prefill), 1 = token-serial prefill (behaves like decode)."
        ),
    )
    max_requests: int | None = Field(
        default=None, ge=1, description="Use only the first N requests of the trace."
    )
    requests: tuple[int, ...] | None = Field(
        default=None,
        min_length=1,
        description=(
            "Use only these request ids of the trace (in the trace's order; before "
            "max_requests); null = all. E.g. the requests a fitted predictor was not fit on."
        ),
    )
    batch_size: int = Field(
        default=1,
        ge=1,
        le=MAX_TOKENS,
        description=(
            "Requests decoded together: a decode pass takes the next token of up to this many "
            "active requests (its demand set per layer is the union over them). A request "
            "joins when a slot is free and runs its prefill chunks first."
        ),
    )
    arrivals: Literal["closed-loop", "poisson", "trace"] = Field(
        default="closed-loop",
        description=(
            "When requests arrive: 'closed-loop' = each when a batch slot frees for it (batch "
            "1: when the previous one has finished); 'poisson' = a Poisson process of "
            "arrival_rate_per_s, drawn from the run's random generator, in trace order; "
            "'trace' = the trace's recorded arrival_s."
        ),
    )
    arrival_rate_per_s: float | None = Field(
        default=None,
        gt=0,
        description=(
            "Mean request arrivals per second, 1/s; required with arrivals: poisson, and "
            "taken by no other arrivals."
        ),
    )
    scheduler: Literal["slots", "continuous"] = Field(
        default="slots",
        description=(
            "How passes are formed: 'slots' = a pass is either one request's prefill chunk or "
            "one decode step of the active requests; 'continuous' = continuous batching as "
            "vLLM and SGLang schedule it: every step takes one decode token of each running "
            "request, then prompt tokens (chunked prefill, FCFS: the running requests' first, "
            "then new ones while fewer than batch_size run) up to max_tokens_per_step, all in "
            "one pass."
        ),
    )
    schedule: Literal["online", "fixed"] = Field(
        default="online",
        description=(
            "When passes are formed under Poisson or recorded arrivals with batch_size > 1 (or "
            "several GPUs with parallel.router: least-loaded): "
            "'online' = each step when it starts, from the requests arrived by then, as a "
            "server's scheduler does (simulate; replay forms the schedule of a machine whose "
            "steps take no time); 'fixed' = the closed-loop table formed before the run, where "
            "a pass that admits a request not yet arrived waits for it with the running ones "
            "(what offline plug-ins that read the whole run ahead, such as Belady, need)."
        ),
    )
    max_tokens_per_step: int | None = Field(
        default=None,
        ge=1,
        le=MAX_TOKENS,
        description=(
            "scheduler: continuous: tokens one pass may take (vLLM's max_num_batched_tokens); "
            "prefill_chunk_tokens (when not 0) also bounds one request's prompt tokens in a "
            "pass. null = no bound."
        ),
    )
    kv_cache: Literal["reserved", "evict", "wait", "paged"] = Field(
        default="reserved",
        description=(
            "The KV cache's share of GPU memory: 'reserved' = the longest request's context "
            "times the requests decoded together, set aside before the run; 'evict' = it grows "
            "with every token of every running request and shrinks when one leaves, and the "
            "expert cache gets what is left (at most cache.capacity): experts the eviction "
            "policy chooses are evicted when it grows; 'wait' (scheduler: continuous) = the "
            "expert cache keeps cache.capacity and a request joins only when its whole KV "
            "cache (prompt and output tokens) fits beside those of the running ones; 'paged' "
            "(scheduler: continuous) = the same pool in blocks of kv_block_tokens, as vLLM "
            "allocates it: a request holds the blocks of the tokens it has computed, and when a "
            "running one needs a block that is not free the last one to join is preempted "
            "(its blocks freed; it recomputes its tokens when it runs again)."
        ),
    )
    kv_block_tokens: int = Field(
        default=16,
        ge=1,
        le=MAX_TOKENS,
        description=(
            "kv_cache: paged: tokens per KV cache block (vLLM's --block-size, 16 by default "
            "on GPUs)."
        ),
    )

    @model_validator(mode="after")
    def _check_rate(self) -> WorkloadConfig:
        if self.arrivals == "poisson" and self.arrival_rate_per_s is None:
            raise ValueError(
                "arrival_rate_per_s: expected a rate > 0 with arrivals: poisson, got none"
            )
        if self.arrivals != "poisson" and self.arrival_rate_per_s is not None:
            raise ValueError(
                f"arrival_rate_per_s: expected none with arrivals: {self.arrivals} (only "
                f"poisson arrivals take a rate), got {self.arrival_rate_per_s:g}"
            )
        if self.scheduler != "continuous":
            if self.max_tokens_per_step is not None:
                raise ValueError(
                    "max_tokens_per_step: expected null with scheduler: slots (it bounds "
                    f"continuous batching's passes), got {self.max_tokens_per_step}"
                )
            if self.kv_cache in ("wait", "paged"):
                raise ValueError(
                    "kv_cache: expected reserved or evict with scheduler: slots (requests wait "
                    f"for KV memory only under continuous batching), got {self.kv_cache!r}"
                )
        return self


class SloConfig(_Frozen):
    """Per-request service-level limits: a request meets the SLO when each limit given holds."""

    ttft_s: float | None = Field(
        default=None,
        gt=0,
        description=(
            "Time to first token limit, s: met when the request's TTFT is at most this (a "
            "request without a prefill has no TTFT and meets it)."
        ),
    )
    tpot_s: float | None = Field(
        default=None,
        gt=0,
        description=(
            "Time per output token limit, s: met when the request's TPOT (per_request.tpot_s: "
            "its decode time over its decode tokens) is at most this (one without decode "
            "tokens meets it)."
        ),
    )

    @model_validator(mode="after")
    def _check_limits(self) -> SloConfig:
        if self.ttft_s is None and self.tpot_s is None:
            raise ValueError("expected at least one of ttft_s and tpot_s, got neither")
        return self


class TimingConfig(_Frozen):
    record_spans: bool = Field(
        default=True, description="Record the span timeline (needed for traces and HTML)."
    )
    chunk_bytes: int | None = Field(
        default=None,
        ge=64 * 1024,
        le=2**63 - 1,
        description=(
            "Split each expert transfer into chunks of at most this many bytes, bytes; a demand "
            "fetch can then overtake a prefetch between chunks. None = whole experts. At least "
            "64 KiB: a chunk is one DMA copy (runtimes copy tensors of megabytes; a smaller copy "
            "is mostly setup latency) and one event of the timing engine."
        ),
    )


def _plugin_field(registry: Any, default: dict[str, Any], what: str) -> Any:
    return Field(default_factory=lambda: registry.parse_config(default), description=what)


class SimConfig(_Frozen):
    """One run. ``model: null`` takes the trace's model."""

    model: str | None = Field(
        default=None, description="Catalog model id; null = the model named by the trace."
    )
    expert_dtype: Dtype | None = Field(
        default=None,
        description=(
            "Override the model's expert precision: bf16, fp16, fp8, int8/int4/int3/int2 "
            "(GPTQ-style, group 128), hqq-2bit/3bit/4bit, GGUF q2_k ... q8_0 and q4_k_m, or "
            "w<bits>g<group> (docs/hardware.md, 'Precisions')."
        ),
    )
    dense_dtype: Dtype | None = Field(
        default=None,
        description=(
            "Override the precision of the non-expert weights (attention, routers, shared "
            "experts, embedding, LM head); same names as expert_dtype."
        ),
    )
    kv_dtype: KvDtype | None = Field(
        default=None,
        description=(
            "Override the precision of the KV cache (its bytes per token, in the memory "
            "budget and in attention's reads); null = the model's (bf16)."
        ),
    )
    hardware: str = Field(
        default="h100-pcie", description="Bundled hardware profile id or path to a YAML file."
    )
    hardware_set: dict[str, Any] = Field(
        default_factory=dict,
        description=(
            "What-ifs on the hardware profile: a dotted path (list items by id or index) -> a "
            "value, with its field's unit if you like ('links.pcie0.bandwidth_bytes_per_s': "
            "'64GB/s'); `--set hardware.<path>=<value>` writes here (docs/hardware.md)."
        ),
    )
    runtime: str = Field(
        default="fused-kernels",
        description=(
            "Bundled runtime profile id (the software stack: dispatch costs, dequantization, "
            "copies, CPU kernels, workspace) or path to a YAML file; docs/runtimes.md."
        ),
    )
    runtime_set: dict[str, Any] = Field(
        default_factory=dict,
        description=(
            "What-ifs on the runtime profile, as hardware_set ('dispatch_overhead_s': '10us', "
            "'kernels.attention': 49); `--set runtime.<path>=<value>` writes here."
        ),
    )
    trace: str = Field(
        default="olmoe-synthetic",
        description="Bundled trace name or path to a .npz routing trace.",
    )
    cache: CacheConfig = Field(default_factory=CacheConfig, description="Expert cache.")
    eviction: SerializeAsAny[PluginConfig] = _plugin_field(
        EVICTION, {"kind": "least-stale"}, "Eviction policy: {kind: ..., params}."
    )
    prefetch: SerializeAsAny[PluginConfig] = _plugin_field(
        PREFETCH, {"kind": "top-k"}, "Prefetch policy: {kind: ..., params}."
    )
    predictor: SerializeAsAny[PluginConfig] = _plugin_field(
        PREDICTORS,
        {"kind": "transition"},
        "Predictor of upcoming experts: {kind: ..., params}. The default, transition, learns "
        "layer-to-layer co-activations online from the run's own routing so far, as a real "
        "system could; noisy-oracle reads the future routing (offline: a bound).",
    )
    miss: SerializeAsAny[PluginConfig] = _plugin_field(
        MISS, {"kind": "stall"}, "What runs when a demanded expert is not resident."
    )
    belady_gap: bool = Field(
        default=False,
        description=(
            "Also replay the same trace, capacity and prefetcher with the offline optimum "
            "(belady, or belady-bypass for policies that stream) and report the gap."
        ),
    )
    workload: WorkloadConfig = Field(default_factory=WorkloadConfig, description="Passes.")
    memory: MemoryConfig = Field(default_factory=MemoryConfig, description="Expert storage tiers.")
    precision: PrecisionConfig = Field(
        default_factory=PrecisionConfig, description="Per-expert precision."
    )
    parallel: ParallelConfig = Field(default_factory=ParallelConfig, description="Multi-GPU.")
    timing: TimingConfig = Field(default_factory=TimingConfig, description="Timing engine.")
    slo: SloConfig | None = Field(
        default=None,
        description=(
            "Service-level objective of the timing engine: per-request TTFT and TPOT limits; "
            "with it a run reports slo_attainment and goodput_rps. null = none."
        ),
    )
    seed: int = Field(default=0, ge=0, description="Seed of the run's one random generator.")

    @field_validator("eviction", mode="before")
    @classmethod
    def _eviction(cls, value: Any) -> PluginConfig:
        return EVICTION.parse_config(value)

    @field_validator("prefetch", mode="before")
    @classmethod
    def _prefetch(cls, value: Any) -> PluginConfig:
        return PREFETCH.parse_config(value)

    @field_validator("predictor", mode="before")
    @classmethod
    def _predictor(cls, value: Any) -> PluginConfig:
        return PREDICTORS.parse_config(value)

    @field_validator("hardware_set", "runtime_set")
    @classmethod
    def _paths_to_values(cls, value: dict[str, Any]) -> dict[str, Any]:
        """A what-if maps a dotted path to one value; a nested mapping (``hardware_set:
        {links: {...}}``) is the path written as sections, which the profile cannot take."""
        for path, item in value.items():
            if isinstance(item, dict | list):
                raise ValueError(
                    f"expected a dotted path mapped to one value (e.g. "
                    f"'links.pcie0.bandwidth_bytes_per_s': '64GB/s'), got a "
                    f"{type(item).__name__} at {path!r}"
                )
        return value

    @field_validator("miss", mode="before")
    @classmethod
    def _miss(cls, value: Any) -> PluginConfig:
        return MISS.parse_config(value)


def build_config(
    data: dict[str, Any] | None = None, source: str = "config", plugins: Iterable[str] = ()
) -> SimConfig:
    """Validate a config mapping, with one-line errors naming the field.

    ``plugins``: modules of the user's own plug-ins to import first, so that the config may
    name them by import path (``kind: "module:Class"``); reading a config imports nothing else.
    """
    load_plugins(plugins)
    try:
        return SimConfig.model_validate(data or {})
    except ValidationError as exc:
        raise from_validation_error(source, exc) from None
    except SpecmdError as exc:  # its kind kept (an UnloadedPlugin stays one)
        raise type(exc)(f"{source}: {exc}") from None


# ``hardware.<path>`` and ``runtime.<path>`` assign a field of the profile (the sections name
# profiles by id): they go to the config's what-ifs on it
PROFILE_OVERRIDES = {"hardware": "hardware_set", "runtime": "runtime_set"}


def apply_overrides(
    data: dict[str, Any], assignments: list[str], source: str = "--set"
) -> dict[str, Any]:
    """Apply ``key.path=value`` strings (value parsed as YAML, with the bounds of the file
    loader; text that is not YAML is taken as is) to a config mapping (a copy); ``source``
    names the assignments in errors.

    Setting a ``kind`` starts its section afresh (the old plug-in's parameters would not fit
    the new one); later assignments add parameters.
    """
    out = _deep_copy(data)
    for text in assignments:
        key, sep, raw = text.partition("=")
        if not sep or not key.strip():
            raise SpecmdError(f"{source}: expected KEY.PATH=VALUE, got {short_repr(text)}")
        try:
            value = parse_yaml(raw, f"{source}: {key.strip()}") if raw.strip() else ""
        except YamlSyntaxError:  # not YAML: the text itself (bounds still apply)
            value = raw
        section, dot, path = key.strip().partition(".")
        if dot and section in PROFILE_OVERRIDES:  # a field of the profile, not the id
            overrides = out.get(PROFILE_OVERRIDES[section])
            out[PROFILE_OVERRIDES[section]] = {**(overrides or {}), path: value}
            continue
        parts = key.strip().split(".")
        node = out
        for part in parts[:-1]:
            child = node.get(part)
            if not isinstance(child, dict):
                child = {} if child is None else _as_mapping(child, part, source)
                node[part] = child
            node = child
        if parts[-1] == "kind" and node.get("kind") != value:
            node.clear()
        node[parts[-1]] = value
    return out


def _as_mapping(value: Any, part: str, source: str) -> dict[str, Any]:
    if isinstance(value, str):  # a plug-in given by kind only
        return {"kind": value}
    raise SpecmdError(f"{source}: expected {part!r} to be a section, got {short_repr(value)}")


def _deep_copy(data: Any) -> Any:
    if isinstance(data, dict):
        return {k: _deep_copy(v) for k, v in data.items()}
    if isinstance(data, list):
        return [_deep_copy(v) for v in data]
    return data


def config_to_dict(config: SimConfig) -> dict[str, Any]:
    """The config as plain JSON-able data (the resolved form written next to results)."""
    return config.model_dump(mode="json")
