"""The miss-handling contract.

When the router of a layer selects an expert that is not resident (a miss, or in the timing
engine also a late hit), the layer step asks ``decide(pass_index, layer, key, cache, taken)``
for a :class:`MissDecision`:

- :data:`FETCH` — fetch it (or wait for its transfer) and run it: the classic *stall*;
- :data:`DROP` — skip this expert activation (an accuracy cost, counted);
- :data:`CPU` — run it on the host CPU, reading its weights from where they are stored (counted);
- ``substitute(by)`` — run ``by``, another resident key of the same layer, instead (counted);
  ``taken`` holds the keys this layer already runs, which must not be chosen again.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, ClassVar

from specmd_sim.policies.plugin import C, Plugin, PluginConfig

if TYPE_CHECKING:
    from specmd_sim.cache.expert_cache import ExpertCache


class MissAction(Enum):
    FETCH = "fetch"
    DROP = "drop"
    CPU = "cpu"
    SUBSTITUTE = "substitute"


@dataclass(frozen=True, slots=True)
class MissDecision:
    """What to do with one demanded expert that is not resident; ``by`` is the resident key
    that runs instead (``SUBSTITUTE`` only)."""

    action: MissAction
    by: int = -1

    def __post_init__(self) -> None:
        if (self.action is MissAction.SUBSTITUTE) != (self.by >= 0):
            raise ValueError(f"MissDecision: 'by' is for SUBSTITUTE only, got {self}")


FETCH = MissDecision(MissAction.FETCH)
DROP = MissDecision(MissAction.DROP)
CPU = MissDecision(MissAction.CPU)


def substitute(by: int) -> MissDecision:
    """Run resident expert ``by`` in place of the missing one."""
    return MissDecision(MissAction.SUBSTITUTE, by)


class MissHandler(Plugin[C]):
    required = (("decide",),)
    always_fetches: ClassVar[bool] = False  # lets engines skip the call on their hot path

    @classmethod
    def fetches_on_demand(cls, config: PluginConfig) -> bool:
        """Whether, with ``config``, a missing expert may be fetched into the cache (pinned with
        its layer's demand set, which must then fit in it); False where it never is, so that a
        layer's demand set may exceed the cache (a long prefill beside a small cache)."""
        return True

    def decide(
        self, pass_index: int, layer: int, key: int, cache: ExpertCache, taken: set[int]
    ) -> MissDecision:
        raise NotImplementedError
