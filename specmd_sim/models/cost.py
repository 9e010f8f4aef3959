"""The compute cost model: a roofline per operation plus the runtime's dispatch costs.

``time(op) = max(flops / (peak_flops * compute_efficiency),
                 bytes / (hbm_bandwidth * memory_efficiency))
             + kernels(op) * (kernel_launch_overhead + dispatch_overhead) + fixed(op)``

The hardware profile gives the roofline and the GPU's launch latency; the runtime profile
(:mod:`specmd_sim.runtime`) the kernels per operation, the framework's host-side cost per
kernel on top of the launch, a fixed cost per expert call and per pass, and how
quantized experts are multiplied: ``fused`` reads the packed bytes, ``dequantize`` first runs
one kernel per matrix that reads the packed bytes and writes 2 bytes per weight, which the
matmul then reads.

Operations per pass (``n`` tokens; token ``i`` at 1-based position ``pos_i`` of its request):

- ``attention`` of an MoE layer: the block, i.e. attention projections, router and shared
  experts (``2 * params * n`` FLOPs, reading the weights once), then the attention core, a
  kernel of its own with its own roofline (``4 * heads * head_dim * sum(pos_i)`` FLOPs at the
  BF16 peak, reading each request's KV cache once, i.e. ``kv_bytes_per_token``
  times the sum of the requests' context ends); a decode pass's core runs the runtime's
  ``decode_attention`` kernel and a prefill pass's its ``prefill_attention`` kernels where it
  names them for an MLA model (:meth:`CostModel.attention_core_time`);
- ``expert``: one routed expert over the ``m`` tokens routed to it
  (``2 * expert_params * m`` FLOPs, reading its weights once);
- ``dense layer``: a layer with a dense FFN (DeepSeek's first layers), run at the start of
  each pass as one span per pass (layer -1);
- ``lm_head``: the output projection for one token per request of the pass (the last prompt
  token of a prefill chunk, each request's token of a decode pass).

Peak FLOP/s by precision (:mod:`specmd_sim.models.precision`): fp8 weights use the GPU's FP8
peak where it has one; weight-only quantized experts run at the BF16 peak (W4A16-style).

CPU experts: ``max(flops / cpu_rate + cpu_expert_overhead, bytes / (dram_bandwidth *
cpu_dram_efficiency [/ sockets unless NUMA-aware]))``, where ``cpu_rate`` is ``min(cpu_threads,
physical_cores) * cpu_clock_hz * ops_per_cycle`` (the min taken per socket where the runtime
binds its threads at the first job that wakes them: :func:`first_job_binding`), when the
runtime states its kernel's measured throughput per core and cycle for an extension the host
has (``cpu_kernel_ops_per_cycle``) and the host its cores, clock and extensions, else
``cpu_flops * cpu_flops_efficiency``. A pass of
fewer tokens than the runtime's ``cpu_grouped_min_tokens`` runs each CPU expert once per token
(each run reads the weights again).

Copies: the thread that runs the model spends ``copy_issue_overhead_s`` issuing each copy of an
expert's tensor (``h2d_tensors_per_expert`` per expert fetched or written back), paid by the
timing engine's stream as a ``copy_issue`` span (:mod:`specmd_sim.engine.sim.stream`); a kernel
that starts while a copy of its GPU moves runs ``1 + copy_interference`` times as long (the
stream lengthens it).

Every hardware number a time is computed from is read through :meth:`CostModel.read`, which
records it in ``used``: a run's lowest grade is derived from what its cost model read.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import numpy as np

from specmd_sim.errors import SpecmdError
from specmd_sim.hardware.schema import GPUNode, HostNode, Quantity
from specmd_sim.hardware.topology import TransferPath
from specmd_sim.models.precision import precision
from specmd_sim.models.spec import ModelSpec
from specmd_sim.runtime.schema import RuntimeProfile

ACT_BYTES = 2  # bf16 activations


@dataclass(frozen=True)
class CostModel:
    """Times of a model's operations on one GPU, in seconds."""

    model: ModelSpec
    gpu: GPUNode
    runtime: RuntimeProfile
    # every hardware number read so far, by id (Quantity models are not hashable)
    used: dict[int, Quantity] = field(default_factory=dict, compare=False, repr=False)
    # expert_time by (tokens, dtype): the hot path of the timing engine (its reads are recorded
    # the first time)
    _experts: dict[tuple[int, str], float] = field(default_factory=dict, compare=False, repr=False)

    def read(self, quantity: Quantity) -> float:
        """``quantity.value``, recorded as used."""
        self.used[id(quantity)] = quantity
        return quantity.value

    def _peak(self, dtype: str) -> float:
        if precision(dtype).compute == "fp8" and self.gpu.dense_fp8_flops is not None:
            return self.read(self.gpu.dense_fp8_flops)
        return self.read(self.gpu.dense_bf16_flops)

    def _bandwidth(self) -> float:
        """The GPU memory's achieved bandwidth: its peak times ``memory_efficiency``."""
        gpu, read = self.gpu, self.read
        return read(gpu.hbm_bandwidth_bytes_per_s) * read(gpu.memory_efficiency)

    def op_time(
        self, flops: float, bytes_: float, dtype: str = "bf16", kernels: int = 1, tokens: int = 0
    ) -> float:
        """Roofline time of ``kernels`` kernels doing ``flops`` and moving ``bytes_`` in all
        over ``tokens`` tokens (0: unknown), plus their dispatch."""
        gpu, read = self.gpu, self.read
        compute = flops / (self._peak(dtype) * read(gpu.compute_efficiency))
        bandwidth = self._bandwidth()
        if tokens and gpu.memory_efficiency_by_tokens is not None:
            bandwidth *= gpu.memory_efficiency_by_tokens.at(tokens)
        memory = bytes_ / bandwidth
        per_kernel = read(gpu.kernel_launch_overhead_s) + read(self.runtime.dispatch_overhead_s)
        return max(compute, memory) + kernels * per_kernel

    def _timed(self, flops: float, bytes_: float, dtype: str, op: str, tokens: int,
               eager: bool, core: float = 0.0) -> float:  # fmt: skip
        """:meth:`op_time` of operation ``op`` (a field of the runtime's kernels) plus the
        ``core`` seconds of its attention core, a kernel of its own; ``eager``: on the
        runtime's eager path (``eager_prefill``), where the host issues the op's ops while the
        GPU runs them: the longer of the GPU's time (as without the eager path) and the
        host's."""
        rt, read = self.runtime, self.read
        gpu = self.op_time(flops, bytes_, dtype, int(read(getattr(rt.kernels, op))), tokens)
        gpu += core
        if eager and rt.eager_prefill is not None:
            ops = read(getattr(rt.eager_prefill.kernels, op))
            return max(gpu, ops * read(rt.eager_prefill.op_overhead_s))
        return gpu

    def _block(self, params: int, tokens: int) -> tuple[float, float]:
        """FLOPs and bytes of a layer's non-expert block outside its attention core: the
        projections, router and shared experts (or the dense FFN), reading the weights once."""
        m = self.model
        weights = params * precision(m.dense_dtype).bytes_per_param
        return 2.0 * params * tokens, weights + 2 * tokens * m.hidden_size * ACT_BYTES

    def __post_init__(self) -> None:
        if self.split_kv and self.gpu.sm_count is None:
            raise SpecmdError(
                f"runtime {self.runtime.id}: decode_attention 'mla-split-kv': expected the "
                f"GPU's sm_count, got none in {self.gpu.name}"
            )

    @property
    def split_kv(self) -> bool:
        """Whether a decode pass's core runs the runtime's ``mla-split-kv`` kernel."""
        kernel = self.runtime.decode_attention
        mla = self.model.mla is not None
        return mla and kernel is not None and kernel.kernel.value == "mla-split-kv"

    @property
    def hands_off(self) -> bool:
        """Whether an eager pass's MoE layers wait for blocking copies (:meth:`handoff_time`)."""
        eager = self.runtime.eager_prefill
        return eager is not None and eager.blocking_copies is not None

    @property
    def materialized_new_tokens(self) -> int | None:
        """The runtime's ``max_new_tokens`` where a prefill pass's core runs its
        ``mla-materialized`` kernels (:meth:`materialized_pairs`), else None."""
        prefill = self.runtime.prefill_attention
        if self.model.mla is None or prefill is None or prefill.kernel.value != "mla-materialized":
            return None
        return int(self.read(prefill.max_new_tokens))

    def attention_core_time(
        self, attended: int, kv_tokens: int, decoding: int = 0, prefill_pairs: int = 0
    ) -> float:
        """The attention core of one layer (scores and values over the cached context), a
        kernel of its own after the projections: a roofline at the BF16 peak (the kernels
        compute in the activations' precision whatever the cache's) over ``4 x heads x
        head_dim`` FLOPs per attended token, reading each request's cache once.
        ``decoding``: the requests of a decode pass (0: not one), whose kernel the runtime's
        ``decode_attention`` may name (:attr:`split_kv`): ``mla-split-kv`` computes absorbed
        MLA, ``2 x heads x (2 x kv_lora_rank + the RoPE key's width)`` FLOPs per attended
        token, on the share of the GPU's SMs its grid of ``decoding x ceil(heads /
        heads_per_cta) x kv_splits`` thread blocks fills (its reads at the GPU's full
        bandwidth). ``prefill_pairs``: where the runtime's ``prefill_attention`` runs its
        ``mla-materialized`` kernels, a prefill pass's (query token, allocated cache slot)
        pairs (:meth:`_materialized_mla_time`; 0: the roofline)."""
        m, gpu, read = self.model, self.gpu, self.read
        if prefill_pairs:
            return self._materialized_mla_time(prefill_pairs)
        flops = 4.0 * m.num_attention_heads * m.head_dim * attended
        share = 1.0
        kernel = self.runtime.decode_attention
        if decoding and kernel is not None and m.mla is not None and self.split_kv:
            latent, rank = m.mla
            flops = 2.0 * m.num_attention_heads * (latent + rank) * attended
            heads, splits, sms = kernel.heads_per_cta, kernel.kv_splits, gpu.sm_count
            assert heads is not None and splits is not None and sms is not None  # (validated)
            groups = -(-m.num_attention_heads // int(read(heads)))
            share = min(1.0, decoding * groups * int(read(splits)) / read(sms))
        compute = flops / (self._peak("bf16") * read(gpu.compute_efficiency) * share)
        bandwidth = self._bandwidth()
        return max(compute, kv_tokens * m.kv_bytes_per_token / bandwidth)

    def materialized_pairs(self, query_tokens: np.ndarray, prompts: np.ndarray) -> int:
        """The (query token, allocated cache slot) pairs of a prefill pass whose requests run
        ``query_tokens`` of prompts of ``prompts`` tokens: each request's cache is allocated
        for its prompt plus :attr:`materialized_new_tokens`."""
        new = self.materialized_new_tokens
        assert new is not None
        return int(np.dot(query_tokens, prompts + new))

    def _materialized_mla_time(self, pairs: int) -> float:
        """Absorbed MLA in eager torch over ``pairs`` (query token, allocated cache slot) pairs
        of one layer, as kTransformers V0.2.0 runs it (``KDeepseekV2Attention.forward_chunck``,
        ``operators/attention.py`` at 7527619): per head and pair, a batched matmul over the
        RoPE key (2 x rope FLOPs) and one over the latent (2 x kv_lora_rank), each writing its
        bf16 scores; the sum (reads 4 bytes, writes 2), the scale (2, 2), the causal mask
        (2, 2), the softmax to fp32 (2, 4), the cast back (4, 2); the einsum with the latent
        (2 x kv_lora_rank FLOPs, reads 2): each a kernel with its own roofline. Every tensor
        but the softmax's output is bf16: local_chat.py sets torch's default dtype to bf16
        before generating (l.269-271), and the model builds its causal mask in the
        embeddings' dtype (``_update_causal_mask``)."""
        gpu, read = self.gpu, self.read
        assert self.model.mla is not None  # (callers: materialized_new_tokens)
        latent, rank = self.model.mla
        elements = float(self.model.num_attention_heads) * pairs
        peak = self._peak("bf16") * read(gpu.compute_efficiency)
        bandwidth = self._bandwidth()
        matmuls = (
            max(2 * (latent - rank) * elements / peak, 2 * elements / bandwidth)
            + max(2 * rank * elements / peak, 2 * elements / bandwidth)
            + max(2 * rank * elements / peak, 2 * elements / bandwidth)
        )
        return matmuls + (6 + 4 + 4 + 6 + 6) * elements / bandwidth

    def attention_time(self, tokens: int, context_end: int) -> float:
        """Non-expert part of one MoE layer for ``tokens`` consecutive tokens of one request
        ending at position ``context_end``."""
        return self.batch_attention_time(tokens, *_one_request(tokens, context_end))

    def batch_attention_time(
        self,
        tokens: int,
        attended: int,
        kv_tokens: int,
        eager: bool = False,
        decoding: int = 0,
        prefill_pairs: int = 0,
    ) -> float:
        """Non-expert part of one MoE layer for a pass whose tokens' positions sum to
        ``attended`` and whose requests' contexts hold ``kv_tokens`` tokens in all: the block
        (:meth:`_block`) and the attention core (:meth:`attention_core_time`; ``decoding``: the
        requests of a decode pass, 0 for any other; ``prefill_pairs``: a prefill pass's pairs
        for the runtime's ``prefill_attention``, 0 for the roofline), one after the other;
        ``eager``: a prefill pass (:meth:`_timed`)."""
        flops, bytes_ = self._block(self.model.moe_layer_dense_params, tokens)
        core = self.attention_core_time(attended, kv_tokens, decoding, prefill_pairs)
        fixed = self.read(self.runtime.layer_overhead_s)
        return self._timed(flops, bytes_, self.model.dense_dtype, "attention", tokens,
                           eager, core) + fixed  # fmt: skip

    def handoff_time(self, link: TransferPath, tokens: int) -> float:
        """Seconds one MoE layer of an eager pass of ``tokens`` tokens waits for its hand-off
        to CPU experts (the runtime's ``eager_prefill.blocking_copies``; 0 where it states
        none): that many copies the host waits for, each taking ``link``'s latency (the GPU's
        path from the host), moving the tokens' hidden states to the host and back and their
        experts' ids (int64) and weights (fp32, the model's ``top_k`` a token) to the host at
        ``link``'s bandwidth (a pinned copy's: from pageable memory it may be slower). The
        links' latencies and bandwidths are recorded as used."""
        eager = self.runtime.eager_prefill
        if eager is None or eager.blocking_copies is None:  # (hands_off)
            return 0.0
        for hop in link.hops:
            for quantity in (hop.link.latency_s, hop.link.bandwidth_bytes_per_s):
                self.used[id(quantity)] = quantity
        m = self.model
        nbytes = tokens * (2 * m.hidden_size * ACT_BYTES + m.top_k * (8 + 4))
        return self.read(eager.blocking_copies) * link.latency_s + nbytes / link.bandwidth

    def dense_layers_time(
        self,
        tokens: int,
        attended: int,
        kv_tokens: int,
        eager: bool = False,
        decoding: int = 0,
        prefill_pairs: int = 0,
    ) -> float:
        """All dense-FFN layers of a pass (DeepSeek's first layers), each its block and its
        attention core as in :meth:`batch_attention_time`; 0 for models without."""
        m = self.model
        if not m.dense_layers:
            return 0.0
        flops, bytes_ = self._block(m.dense_layer_params, tokens)
        core = self.attention_core_time(attended, kv_tokens, decoding, prefill_pairs)
        return m.dense_layers * self._timed(flops, bytes_, m.dense_dtype, "dense_layer", tokens,
                                            eager, core)  # fmt: skip

    def expert_time(self, tokens: int, dtype: str | None = None) -> float:
        """One routed expert applied to ``tokens`` tokens, its weights stored at ``dtype``
        (default: the model's expert dtype)."""
        dtype = dtype or self.model.expert_dtype
        seconds = self._experts.get((tokens, dtype))
        if seconds is None:
            seconds = self._experts[tokens, dtype] = self._expert_time(tokens, dtype)
        return seconds

    def _expert_time(self, tokens: int, dtype: str) -> float:
        m, rt, read = self.model, self.runtime, self.read
        flops = float(m.expert_flops_per_token) * tokens
        packed = m.expert_bytes_at(dtype)
        acts = 2 * tokens * m.hidden_size * ACT_BYTES
        fixed = read(rt.expert_call_overhead_s)
        kernels = int(read(rt.kernels.expert))
        if not precision(dtype).quantized or rt.dequant.value == "fused":
            return self.op_time(flops, packed + acts, dtype, kernels, tokens) + fixed
        # dequantize to 16 bits first (memory-bound), then a 16-bit matmul
        expanded = 2 * m.expert_params
        dequant = self.op_time(
            0.0, packed + expanded, dtype, int(read(rt.dequant_kernels_per_expert))
        )
        return dequant + self.op_time(flops, expanded + acts, dtype, kernels, tokens) + fixed

    def cpu_rate(self, host: HostNode) -> float:
        """FLOP/s of the runtime's CPU expert kernel on ``host``: its measured throughput per
        core and cycle for the widest extension the host has, times the cores it runs on and
        their clock; else the fraction ``cpu_flops_efficiency`` of the host's peak."""
        rt, read = self.runtime, self.read
        kernels, cores, clock, isa = (
            rt.cpu_kernel_ops_per_cycle, host.physical_cores, host.cpu_clock_hz, host.isa,
        )  # fmt: skip
        kernel = kernels.for_host(isa) if kernels is not None and isa is not None else None
        if kernel is None or cores is None or clock is None:
            return read(host.cpu_flops) * read(rt.cpu_flops_efficiency)
        wanted = read(cores) if rt.cpu_threads is None else read(rt.cpu_threads)
        threads = min(wanted, read(cores))
        binding = rt.cpu_thread_binding
        if (binding is not None and binding.value == "first-job" and rt.cpu_numa_aware.value
                and host.sockets is not None and read(host.sockets) > 1):  # fmt: skip
            sockets = int(read(host.sockets))
            bound = first_job_binding(int(wanted), sockets, self._warm_up_tasks())
            threads = sum(min(n, read(cores) / sockets) for n in bound)
        return threads * read(clock) * read(kernel)

    def _warm_up_tasks(self) -> tuple[int, ...]:
        """The tasks of the CPU kernel's jobs at load, in order: a warm-up of one expert on one
        token (kTransformers' ``MOE::warm_up``, ``forward_one(k=1)``): its gate and up
        projections (the expert width / stride), then its down projection (hidden / stride)."""
        stride = self.runtime.cpu_task_stride
        assert stride is not None  # (the schema checks)
        rows = int(self.read(stride))
        return self.model.moe_intermediate_size // rows, self.model.hidden_size // rows

    def cpu_runs(self, tokens: int, pass_tokens: int | None) -> tuple[int, int]:
        """(runs, tokens per run) of one CPU expert over ``tokens`` tokens of a pass of
        ``pass_tokens`` (None: unknown, grouped): one run, unless the pass has fewer tokens
        than the runtime's ``cpu_grouped_min_tokens``, when each token runs alone."""
        floor = self.runtime.cpu_grouped_min_tokens
        if floor is not None and pass_tokens is not None and pass_tokens < self.read(floor):
            return tokens, 1
        return 1, tokens

    def cpu_expert_flops_time(self, host: HostNode, tokens: int) -> float:
        """The compute part of one run of a routed expert on the host CPU over ``tokens``."""
        flops = float(self.model.expert_flops_per_token) * tokens
        return flops / self.cpu_rate(host) + self.read(self.runtime.cpu_expert_overhead_s)

    def cpu_dram_rate(self, host: HostNode) -> float:
        """Bytes/s one CPU expert kernel reads its weights at: the runtime's fraction of the
        DRAM bandwidth, of one socket's share unless the runtime is NUMA-aware."""
        rt, read = self.runtime, self.read
        rate = read(host.dram_bandwidth_bytes_per_s) * read(rt.cpu_dram_efficiency)
        if host.sockets is not None and not rt.cpu_numa_aware.value:
            rate /= read(host.sockets)
        return rate

    def cpu_expert_time(
        self, host: HostNode, tokens: int, nbytes: int | None = None, pass_tokens: int | None = None
    ) -> float:
        """One routed expert of ``nbytes`` (default: at the model's dtype) on the CPU alone: its
        compute against its weight reads at :meth:`cpu_dram_rate`, once per run
        (:meth:`cpu_runs`)."""
        nbytes = self.model.expert_bytes if nbytes is None else nbytes
        runs, per_run = self.cpu_runs(tokens, pass_tokens)
        one = max(self.cpu_expert_flops_time(host, per_run), nbytes / self.cpu_dram_rate(host))
        return runs * one

    def lm_head_time(self, tokens: int = 1, eager: bool = False) -> float:
        """The output projection for ``tokens`` tokens (one per request of the pass), with the
        pass's other work outside the layers (``kernels.token``)."""
        m = self.model
        params = m.hidden_size * m.vocab_size
        flops = 2.0 * params * tokens
        nbytes = params * precision(m.dense_dtype).bytes_per_param
        head = self._timed(flops, nbytes, m.dense_dtype, "token", tokens, eager)
        return head + self.read(self.runtime.token_overhead_s)

    def copy_issue_time(self) -> float:
        """Host time of issuing one copy of an expert's tensor (``copy_issue_overhead_s``; 0
        where the runtime does not state it)."""
        issue = self.runtime.copy_issue_overhead_s
        return 0.0 if issue is None else self.read(issue)

    def copy_slowdown(self) -> float:
        """The factor a compute kernel's time is multiplied by when it starts while a copy of
        its GPU moves (``1 + copy_interference``; 1 where the runtime does not state it)."""
        interference = self.runtime.copy_interference
        return 1.0 if interference is None else 1.0 + self.read(interference)


def _one_request(tokens: int, context_end: int) -> tuple[int, int]:
    """(sum of positions, KV tokens) of ``tokens`` consecutive tokens ending at ``context_end``."""
    return tokens * context_end - tokens * (tokens - 1) // 2, context_end


@functools.cache
def first_job_binding(threads: int, sockets: int, jobs: tuple[int, ...]) -> tuple[int, ...]:
    """Threads per socket when each thread binds itself, at the first job that wakes it, to
    socket ``thread_id * sockets / n`` with ``n = min(threads, the job's tasks)``, a job waking
    threads ``0..n-1``: kTransformers V0.2.0/V0.2.1 (``Backend::do_work_stealing_job`` and
    ``process_tasks`` in ``cpu_backend/backend.cpp`` at 7527619, ``thread_num_ =
    min(max_thread_num_, task_num)``; V0.2.2 wakes every thread, b2bff177). ``jobs``: the tasks
    of the first jobs in order; threads none of them wakes bind at a later job that wakes them
    all. Cached: the rate of every CPU expert run reads it."""
    socket = [-1] * threads
    for tasks in [*jobs, threads]:
        n = min(threads, tasks)
        for i in range(n):
            if socket[i] < 0:
                socket[i] = i * sockets // n
    return tuple(socket.count(s) for s in range(sockets))
