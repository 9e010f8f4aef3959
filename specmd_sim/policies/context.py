"""What a plug-in is given when a run starts: the online view of the run, or, for a plug-in that
declares itself offline, that view plus the run's future.

**Online** (:class:`RunContext`, every plug-in): what a serving system knows. Before the run:
the model's shape, the cache's slots, the run's random generator, the cost model of its GPU,
and per expert its bytes, precision and the path it reaches the GPU by. During the run, through
:class:`RunHistory`, what has happened so far: the pass table of the passes started (request,
phase, tokens), the router decision of every (pass, layer) whose router has decided (experts,
tokens per expert, gates), and the predictions the trace recorded for the tokens of those
passes, made at those layers. The history follows the run's position (the cache reports every
pass start and router decision to it); asking it for anything later raises
:class:`FutureAccessError`, so an online plug-in cannot read the future, not even by mistake.

**Offline** (:class:`OfflineContext`, plug-ins that declare ``offline = True``): adds
``demand``, the run's whole
:class:`AccessSequence` (every demand set, in the order the engines follow them), which bounds
(Belady), oracles and plug-ins that profile the run's own trace read in advance.

All of it is plain data (numpy arrays and the small classes below): the policies know nothing
of how a scenario is built from a config.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

if TYPE_CHECKING:
    from specmd_sim.hardware import HardwareProfile, TransferPath
    from specmd_sim.models.cost import CostModel
    from specmd_sim.models.spec import ModelSpec


@dataclass(frozen=True, slots=True)
class DemandSet:
    """The router decision of one (pass, layer): its experts' flat ids, highest gate first, the
    pass's tokens routed to each and each one's highest gate (NaN without gates). Views into
    the access sequence: do not write to them."""

    keys: np.ndarray  # int32
    tokens: np.ndarray  # int32
    gates: np.ndarray  # float32


@dataclass(frozen=True, eq=False)
class AccessSequence:
    """The demand sets of every (pass, layer) in run order; their concatenation is the run's
    access sequence, which every engine follows."""

    keys: np.ndarray  # int32 [A]: flat expert ids
    tokens: np.ndarray  # int32 [A]: tokens of the pass routed to that expert
    gates: np.ndarray  # float32 [A]: its highest gate in the pass; NaN without gates
    offsets: np.ndarray  # int64 [P * L + 1]: (p, l) is keys[offsets[p * L + l] : ... + 1]]
    num_layers: int

    @property
    def num_accesses(self) -> int:
        return int(self.offsets[-1])

    def span(self, p: int, layer: int) -> tuple[int, int]:
        i = p * self.num_layers + layer
        return int(self.offsets[i]), int(self.offsets[i + 1])

    def keys_of(self, p: int, layer: int) -> np.ndarray:
        lo, hi = self.span(p, layer)
        return self.keys[lo:hi]

    def at(self, p: int, layer: int) -> DemandSet:
        lo, hi = self.span(p, layer)
        return DemandSet(self.keys[lo:hi], self.tokens[lo:hi], self.gates[lo:hi])


class PassInfo(NamedTuple):
    """What the serving system knows of a pass when it starts."""

    request: int  # its (first) request; a prefill pass has one
    phase: int  # 0 prefill, 1 decode
    tokens: int  # tokens it processes
    context_end: int  # its request's tokens up to and including this pass
    attended: int  # the sum of its tokens' positions in their requests (1-based)
    kv_tokens: int  # the tokens of its requests' KV caches after it (what attention reads)


@dataclass(frozen=True, eq=False)
class PassTable:
    """The run's passes (per pass p): the facts of :class:`PassInfo`, as arrays."""

    request: np.ndarray  # int32 [P]
    phase: np.ndarray  # uint8 [P]
    tokens: np.ndarray  # int64 [P]
    context_end: np.ndarray  # int64 [P]
    attended: np.ndarray  # int64 [P]
    kv_tokens: np.ndarray  # int64 [P]

    def info(self, p: int) -> PassInfo:
        return PassInfo(
            int(self.request[p]), int(self.phase[p]), int(self.tokens[p]),
            int(self.context_end[p]), int(self.attended[p]), int(self.kv_tokens[p]),
        )  # fmt: skip


@dataclass(frozen=True, eq=False)
class RecordedScores:
    """The predictions a trace recorded (``pred_scores``, ``[D, T, L, E]``: for layer ``l`` of
    token ``t``, made ``j`` layers earlier, at index ``j - 1``) and which trace rows each pass
    processes."""

    scores: np.ndarray  # [D, T, L, E], often float16 and memory-mapped
    rows: np.ndarray  # int64 [N]: trace rows in pass order
    start: np.ndarray  # int64 [P + 1]: pass p covers rows[start[p] : start[p + 1]]

    def block(self, p: int, made_at: int, target: int) -> np.ndarray | None:
        """``[tokens of pass p, E]``: the scores for layer ``target`` made at layer
        ``made_at``, or None if the trace does not record that distance."""
        j = target - made_at
        if not 1 <= j <= self.scores.shape[0]:
            return None
        rows = self.rows[self.start[p] : self.start[p + 1]]
        return self.scores[j - 1, rows, target]


class FutureAccessError(RuntimeError):
    """An online plug-in asked the run's history for something that has not happened yet."""


class RunHistory:
    """What the run has seen so far: started passes, decided routers, predictions made.

    ``now`` is the position the cache last reported: ``(pass, layer)`` at the router decision
    of that layer, ``(pass, -1)`` at the start of a pass. The demand set of ``(p, l)`` is known
    from its router decision on (so at ``on_layer``, the miss decisions and the prefetch plan of
    that layer), a pass's :class:`PassInfo` from its start, and a recorded prediction from the
    layer it was made at.
    """

    def __init__(
        self, demand: AccessSequence, passes: PassTable, recorded: RecordedScores | None
    ) -> None:
        self._demand = demand
        self._passes = passes
        self._recorded = recorded
        self._layers = demand.num_layers
        self._pass = -1  # the pass running; -1 before the first
        self._now = -self._layers - 1  # pass * L + layer of the position now

    def advance(self, pass_index: int, layer: int) -> None:
        """Move to ``(pass_index, layer)`` (the cache calls this; see ``now``)."""
        self._pass = pass_index
        self._now = pass_index * self._layers + layer

    @property
    def now(self) -> tuple[int, int]:
        return self._pass, self._now - self._pass * self._layers

    @property
    def records_scores(self) -> bool:
        """Whether the trace recorded predictions (``pred_scores``)."""
        return self._recorded is not None

    def pass_info(self, p: int) -> PassInfo:
        if p > self._pass:
            self._future("the pass table", p, -1)
        return self._passes.info(p)

    def keys_of(self, p: int, layer: int) -> np.ndarray:
        """The experts' flat ids of the router decision of ``(p, layer)``, highest gate first."""
        if p * self._layers + layer > self._now:
            self._future("the demand set", p, layer)
        return self._demand.keys_of(p, layer)

    def demand_set(self, p: int, layer: int) -> DemandSet:
        if p * self._layers + layer > self._now:
            self._future("the demand set", p, layer)
        return self._demand.at(p, layer)

    def recorded_scores(self, p: int, made_at: int, target: int) -> np.ndarray | None:
        """``[tokens of pass p, E]``: the trace's predictions for layer ``target`` made at layer
        ``made_at`` (< target) for the tokens of pass ``p``; None if the trace records none for
        that distance (or no predictions at all)."""
        if p * self._layers + made_at > self._now:
            self._future("a recorded prediction", p, made_at)
        if self._recorded is None:
            return None
        return self._recorded.block(p, made_at, target)

    def _future(self, what: str, p: int, layer: int) -> None:
        now_p, now_layer = self.now
        raise FutureAccessError(
            f"{what} of pass {p}, layer {layer} is not known yet: the run is at pass {now_p}, "
            f"layer {now_layer}; a plug-in that needs the future must declare offline = True"
        )


@dataclass(frozen=True, eq=False)
class RunContext:
    """The online view of one GPU's run, shared by all its plug-ins (see module docstring).

    ``rng`` is the run's one random generator; plug-ins draw from it in a deterministic order
    (the engines call them in pass, layer order), so the same seed gives the same run.
    """

    num_layers: int
    num_experts: int  # per layer; key = layer * num_experts + expert
    top_k: int  # experts each token is routed to, as the routing records it
    slots: int  # expert slots of the cache (of the largest expert size)
    rng: np.random.Generator
    model: ModelSpec
    profile: HardwareProfile
    cost: CostModel  # compute times on the run's GPU
    nbytes: np.ndarray  # int64 per key: bytes at the expert's precision
    dtype: tuple[str, ...]  # per key: the expert's precision
    paths: tuple[TransferPath, ...]  # every path experts reach the GPU by (paths[0]: host DRAM)
    source: np.ndarray  # int32 per key: index into paths; -1 = the GPU's own shard
    history: RunHistory

    @property
    def path(self) -> TransferPath:
        """How experts reach the GPU from host DRAM."""
        return self.paths[0]

    def fetch_time(self, key: int) -> float:
        """Seconds to move expert ``key`` to the GPU alone on its path (0 for the GPU's own
        shard): latency + its bytes / the path's bandwidth."""
        i = int(self.source[key])
        if i < 0:
            return 0.0
        path = self.paths[i]
        return path.latency_s + int(self.nbytes[key]) / path.bandwidth


@dataclass(frozen=True, eq=False)
class OfflineContext(RunContext):
    """The online view plus the run's future: given only to offline plug-ins."""

    demand: AccessSequence  # every demand set of the run, in run order


@dataclass(frozen=True, eq=False)
class RunViews:
    """The two views of one run: the online one, and the offline one built on it (sharing its
    generator and history)."""

    online: RunContext
    offline: OfflineContext

    @classmethod
    def of(cls, ctx: RunContext, demand: AccessSequence) -> RunViews:
        fields_ = {f.name: getattr(ctx, f.name) for f in fields(ctx)}
        return cls(ctx, OfflineContext(**fields_, demand=demand))

    def view(self, offline: bool) -> RunContext:
        """What a plug-in sees: the offline view if it declares ``offline``, else the online."""
        return self.offline if offline else self.online
