"""Runtime profile schema: the software stack that runs a model, apart from the hardware.

Two systems on the same GPU differ by a factor of several in tokens/s (eager PyTorch with
per-parameter copies against fused kernels with packed experts): the difference is the
software. A runtime profile holds what it costs, each number a
:class:`~specmd_sim.hardware.schema.Quantity` with ``value``, ``source`` and ``grade`` like a
hardware profile's:

- **dispatch**: a host-side cost per kernel the framework launches (Python, the dispatcher; the
  GPU profile adds its launch latency), and how many kernels each operation is (an MoE layer's
  non-expert block, one expert call, the per-token head), plus fixed per-expert-call and
  per-token costs;
- **dequantization**: whether quantized experts are multiplied by a fused kernel that reads the
  packed weights, or dequantized to 16 bits first (a kernel that reads the packed bytes and
  writes 2 bytes per weight, which the matmul reads again);
- **host-to-device copies**: how many tensors one expert is copied as (each pays the link's
  per-transfer latency), the fraction of the link bandwidth a copy achieves (1 for pinned
  memory; pageable copies go through a driver staging buffer), whether copies run on their
  own streams or on the compute stream (then no copy overlaps compute), the host time the
  model's thread spends issuing each copy, and how much a copy moving slows the compute;
- **CPU expert kernels**: the fraction of DRAM bandwidth they achieve; their compute rate, either
  measured per core and cycle for the instruction-set extension they are built for (the host
  supplies cores, clock and extensions) or as a fraction of the host's CPU FLOP/s; the threads
  they run on; whether they are NUMA-aware (each socket reads its own DRAM) or read one
  socket's; and how few tokens a pass may have before they run one token at a time;
- **memory**: the GPU workspace the runtime keeps besides weights and KV cache, and whether the
  host keeps only the experts the GPU does not (*memory parity*: each evicted expert is copied
  back).

``docs/runtimes.md`` describes the bundled runtimes; the cost model reads the numbers through
its ledger, so a run's grade includes them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Literal

from pydantic import Field, model_validator

from specmd_sim.hardware.schema import (
    ClockHz,
    CoreLevel,
    Count,
    Fraction,
    Grade,
    IsaLevel,
    NonNegativeBytes,
    Quantity,
    Seconds,
)
from specmd_sim.schema_base import InputModel


class Setting(InputModel):
    """A setting that is not a number, with provenance (subclasses constrain ``value``)."""

    value: str | bool
    source: str = Field(min_length=1, description="Where the setting comes from.")
    grade: Grade = Field(description="Confidence: A measured, B documented, C derived, D assumed.")


class Dequant(Setting):
    value: Literal["fused", "dequantize"] = Field(
        description=(
            "'fused': quantized matmul kernels read the packed weights; 'dequantize': each "
            "weight matrix is first expanded to 16 bits by its own kernel."
        )
    )


class Flag(Setting):
    value: bool


class CopyStream(Setting):
    value: Literal["separate", "compute"] = Field(
        description=(
            "'separate': host-to-device copies run on copy streams beside compute; 'compute': "
            "they are issued on the compute stream, so no kernel runs while a copy is queued "
            "or moving (nothing overlaps)."
        )
    )


class ThreadBinding(Setting):
    value: Literal["even", "first-job"] = Field(
        description=(
            "How a NUMA-aware runtime's CPU threads are bound to the sockets: 'even': evenly; "
            "'first-job': each thread to node thread_id * sockets / n at the first job that "
            "wakes it, n = min(threads, that job's tasks), the first jobs being the load-time "
            "warm-up (kTransformers V0.2.0/V0.2.1)."
        )
    )


class DecodeKernel(Setting):
    value: Literal["roofline", "mla-split-kv"] = Field(
        description=(
            "'roofline': a decode pass's attention core (scores and values over the cached "
            "context) is one roofline over the whole GPU, 4 x heads x head_dim FLOPs per "
            "attended token; 'mla-split-kv': absorbed MLA over the cached latent, 2 x heads x "
            "(2 x kv_lora_rank + the RoPE key's width) FLOPs per attended token, in one grid of "
            "requests x ceil(heads / heads_per_cta) x kv_splits thread blocks, which runs on "
            "that many of the GPU's SMs (SGLang's decode_attention_fwd_grouped, as kTransformers "
            "V0.2.1 runs it); a model without MLA runs 'roofline'."
        )
    )


class DecodeAttention(InputModel):
    """The kernel a decode pass's attention core runs: where it is not a roofline over the
    whole GPU, its grid of thread blocks decides how much of the GPU it uses."""

    kernel: DecodeKernel = Field(description="The decode attention kernel.")
    heads_per_cta: Count | None = Field(
        default=None, description="Query heads one thread block computes ('mla-split-kv')."
    )
    kv_splits: Count | None = Field(
        default=None,
        description="Thread blocks the cached context of one request's head group is split "
        "over ('mla-split-kv').",
    )

    @model_validator(mode="after")
    def _split_kv_has_its_grid(self) -> DecodeAttention:
        if self.kernel.value == "mla-split-kv" and (
            self.heads_per_cta is None or self.kv_splits is None
        ):
            raise ValueError(
                "decode_attention: expected heads_per_cta and kv_splits, which kernel "
                "'mla-split-kv' needs, got "
                f"heads_per_cta {_value(self.heads_per_cta)}, kv_splits {_value(self.kv_splits)}"
            )
        return self


def _value(quantity: Quantity | None) -> object:
    return None if quantity is None else quantity.value


class PrefillKernel(Setting):
    value: Literal["roofline", "mla-materialized"] = Field(
        description=(
            "'roofline': a prefill pass's attention core is one roofline over the whole GPU; "
            "'mla-materialized': absorbed MLA in eager torch over the whole allocated cache "
            "(the prompt plus max_new_tokens), the heads x query tokens x cache tokens scores "
            "written out and passed through add, scale, mask, softmax in fp32 and the cast back "
            "(kTransformers V0.2.0's forward_chunck); a model without MLA runs 'roofline'."
        )
    )


class PrefillAttention(InputModel):
    """The kernels a prefill pass's attention core runs, where they are not one roofline."""

    kernel: PrefillKernel = Field(description="The prefill attention kernel.")
    max_new_tokens: Count = Field(
        description="Tokens the runtime allocates the KV cache for beyond the prompt "
        "('mla-materialized' attends to all of them, masked)."
    )


class Kernels(InputModel):
    """Kernels launched per operation (each pays ``dispatch_overhead_s``)."""

    attention: Count = Field(
        description=(
            "One MoE layer's non-expert block: norms, q/k/v/o projections, rotary, attention, "
            "router and top-k, shared experts, residual adds."
        )
    )
    expert: Count = Field(description="One routed-expert call: gate, up, activation, down.")
    dense_layer: Count = Field(description="One dense-FFN layer (attention block and its FFN).")
    token: Count = Field(
        description="Per pass outside the layers: embedding, final norm, LM head, sampling."
    )


class EagerPasses(InputModel):
    """Passes a runtime runs eagerly where it captures its decode steps in CUDA graphs: the
    host issues each op (Python, the dispatcher, the launch) while the GPU runs those issued,
    so an operation takes the longer of its GPU time and its ops' host time."""

    op_overhead_s: Seconds = Field(
        description="Host time to issue one op eagerly (Python, dispatcher and launch), s."
    )
    kernels: Kernels = Field(description="Ops per operation on the eager path.")
    blocking_copies: Count | None = Field(
        default=None,
        description=(
            "Copies each MoE layer of an eager pass waits for to hand its tokens to CPU "
            "experts and back (tensor.cpu(), .to(device) from pageable memory): each takes "
            "the latency of the GPU's link to the host, and together they move the tokens' "
            "hidden states both ways and their experts' ids and weights at its bandwidth. "
            "None: none."
        ),
    )


# A kernel at most 101 times as long beside a copy: every time it lengthens stays finite, and the
# bound is far above any measured (the most, an expert call beside a thread copying experts, took
# 2.5x: docs/validation-method.md, *The copy workers slow the compute thread*)
MAX_SLOWDOWN = 100.0


class Slowdown(Quantity):
    value: float = Field(
        ge=0, le=MAX_SLOWDOWN, description="The fraction a time grows by, in [0, 100]."
    )


class OpsPerCycle(Quantity):
    value: float = Field(
        gt=0, le=1e6, description="Useful operations (2 per multiply-add) per core per cycle."
    )


class CpuKernels(InputModel):
    """The measured throughput of a runtime's CPU expert kernel, per core and cycle, for each
    instruction-set extension it is built for (the build picks the widest the host has)."""

    avx2: OpsPerCycle | None = Field(default=None, description="Built for AVX2.")
    avx512: OpsPerCycle | None = Field(default=None, description="Built for AVX-512 (VNNI).")
    amx: OpsPerCycle | None = Field(default=None, description="Built for AMX.")

    def for_host(self, isa: IsaLevel) -> OpsPerCycle | None:
        """The kernel a host of extension level ``isa`` runs: the widest one it has."""
        for name in ("amx", "avx512", "avx2"):
            kernel = getattr(self, name)
            if kernel is not None and isa.has(name):
                return kernel
        return None


class HostReference(InputModel):
    """The host a runtime's host-side costs are stated for: on a host of another single-thread
    speed they scale by this one's speed over that one's (:mod:`specmd_sim.runtime.host_rule`)."""

    name: str = Field(min_length=1, description="The CPU, e.g. '2x AMD EPYC 7742'.")
    boost_clock_hz: ClockHz = Field(description="Its maximum boost clock, Hz.")
    core: CoreLevel = Field(description="Its core's microarchitecture.")


class RuntimeProfile(InputModel):
    """A software stack: dispatch costs, dequantization, copies, CPU kernels, workspace."""

    schema_version: Literal[1] = Field(description="Runtime schema version; currently 1.")
    id: str = Field(min_length=1, description="Runtime id; a bundled runtime's file stem.")
    name: str = Field(description="Human-readable name.")
    description: str = Field(default="", description="Which systems it stands for and how.")
    dispatch_overhead_s: Seconds = Field(
        description=(
            "Host-side framework time per kernel (Python, dispatcher), s, on top of the GPU "
            "profile's kernel_launch_overhead_s."
        )
    )
    kernels: Kernels = Field(description="Kernels per operation.")
    eager_prefill: EagerPasses | None = Field(
        default=None,
        description="Prefill passes run eagerly (the decode steps' CUDA graphs are captured "
        "for one token), each operation taking the longer of its GPU time and its ops' host "
        "time; None: every pass as dispatch_overhead_s and kernels say.",
    )
    decode_attention: DecodeAttention | None = Field(
        default=None,
        description="The kernel a decode pass's attention core runs; None: a roofline over "
        "the whole GPU ('roofline').",
    )
    prefill_attention: PrefillAttention | None = Field(
        default=None,
        description="The kernels a prefill pass's attention core runs; None: a roofline over "
        "the whole GPU ('roofline').",
    )
    expert_call_overhead_s: Seconds = Field(
        description="Fixed host-side cost per routed-expert call beyond its kernels (cache "
        "lookup, bookkeeping), s."
    )
    layer_overhead_s: Seconds = Field(
        description="Fixed host-side cost per MoE layer beyond its kernels (the layer's cache "
        "decisions and bookkeeping), s."
    )
    token_overhead_s: Seconds = Field(
        description="Fixed cost per pass that ends with the LM head (generate loop, logits "
        "processing, sampling, synchronisation), s."
    )
    dequant: Dequant = Field(description="How quantized experts are multiplied.")
    dequant_kernels_per_expert: Count = Field(
        description="Dequantization kernels per expert call in 'dequantize' mode (one per matrix)."
    )
    h2d_tensors_per_expert: Count = Field(
        description="Separate host-to-device copies one expert takes (each pays link latency)."
    )
    copy_stream: CopyStream = Field(
        description="Whether copies overlap compute ('separate') or queue with it ('compute')."
    )
    host_reference: HostReference | None = Field(
        default=None,
        description="The host whose single thread the host-side costs (dispatch_overhead_s, "
        "expert_call_overhead_s, layer_overhead_s, token_overhead_s, copy_issue_overhead_s, "
        "eager_prefill.op_overhead_s) are stated for; on a host that states its boost clock "
        "and core they scale by this host's single-thread speed over that one's. None: they "
        "are not scaled.",
    )
    copy_issue_overhead_s: Seconds | None = Field(
        default=None,
        description="Host time the thread that runs the model spends issuing one copy of an "
        "expert's tensor (host-to-device, or memory parity's write-back; an expert is "
        "h2d_tensors_per_expert copies), paid on the compute stream of the GPU whose copy it "
        "is, s; None: issuing costs nothing.",
    )
    copy_interference: Slowdown | None = Field(
        default=None,
        description="The fraction by which one of the GPU's compute kernels slows when it "
        "starts while a copy to or from that GPU is moving (contention of copies with compute: "
        "the issuing host thread, the driver, memory bandwidth); measured by specmd calibrate; "
        "None: copies cost the compute nothing.",
    )
    h2d_efficiency: Fraction = Field(
        description="Fraction of a link's achievable bandwidth one copy reaches (1 = pinned)."
    )
    cpu_dram_efficiency: Fraction = Field(
        description="Fraction of DRAM bandwidth CPU expert kernels reach."
    )
    cpu_flops_efficiency: Fraction = Field(
        description="Fraction of CPU peak FLOP/s CPU expert kernels reach."
    )
    cpu_kernel_ops_per_cycle: CpuKernels | None = Field(
        default=None,
        description="The CPU expert kernel's measured throughput per core and cycle, by the "
        "extension it is built for; on a host that states its cores, clock and extensions it "
        "replaces cpu_flops x cpu_flops_efficiency.",
    )
    cpu_threads: Count | None = Field(
        default=None,
        description="Threads the CPU expert kernels run on (at most one per physical core "
        "counts); None: every physical core.",
    )
    cpu_thread_binding: ThreadBinding | None = Field(
        default=None,
        description="With cpu_numa_aware, how the threads are bound to the sockets ('first-job' "
        "needs cpu_task_stride); None: evenly. A socket computes with at most one thread per "
        "physical core.",
    )
    cpu_task_stride: Count | None = Field(
        default=None,
        description="Output rows of an expert matrix per task of the CPU kernel's thread pool "
        "(a job's tasks: the matrix's rows / stride per expert); used by cpu_thread_binding.",
    )
    cpu_grouped_min_tokens: Count | None = Field(
        default=None,
        description="A pass of fewer tokens runs its CPU experts one token at a time, each "
        "token reading its experts' weights again; None: the tokens of a pass share the reads.",
    )
    cpu_numa_aware: Flag = Field(
        description="CPU experts read their own socket's DRAM on every socket (else one socket's)."
    )
    cpu_expert_overhead_s: Seconds = Field(
        description="Fixed cost per expert run on the CPU (thread-pool dispatch, sync), s."
    )
    workspace_bytes: NonNegativeBytes = Field(
        description="GPU memory the runtime keeps besides weights and KV cache (CUDA context, "
        "allocator slack, activations, staging buffers), bytes."
    )
    memory_parity: Flag = Field(
        description=(
            "The host keeps only the experts not cached on the GPU: the cache's capacity is "
            "taken off the host memory the experts need, and every evicted expert is copied "
            "back to the host (device-to-host, on the GPU's D2H copy engines)."
        )
    )

    @model_validator(mode="after")
    def _binding_has_its_stride(self) -> RuntimeProfile:
        binding = self.cpu_thread_binding
        if binding is not None and binding.value == "first-job" and self.cpu_task_stride is None:
            raise ValueError(
                "cpu_task_stride: expected the CPU kernel's rows per task, which "
                "cpu_thread_binding 'first-job' needs, got none"
            )
        return self

    def settings(self) -> Iterator[tuple[str, Setting]]:
        """Every setting that is not a number (dequantization, copy stream, ...) by name."""
        for name in type(self).model_fields:
            value = getattr(self, name)
            if isinstance(value, Setting):
                yield name, value

    def quantities(self) -> Iterator[tuple[str, Quantity]]:
        """Every number of the runtime with its dotted name (groups such as ``kernels`` and
        ``eager_prefill.kernels`` flattened)."""
        return _numbers(self)


def _numbers(group: InputModel) -> Iterator[tuple[str, Quantity]]:
    """The numbers of ``group``'s fields, those of the groups in it dotted."""
    for name in type(group).model_fields:
        value = getattr(group, name)
        if isinstance(value, Quantity):
            yield name, value
        elif isinstance(value, InputModel):
            for sub, quantity in _numbers(value):
                yield f"{name}.{sub}", quantity
