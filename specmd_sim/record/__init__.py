"""Record a Hugging Face MoE model's routing into a v1 trace (the ``record`` extra).

:func:`record_trace` runs a model on prompts with forward hooks on its router modules and
returns the trace: per token and MoE layer the selected experts and the router's own weights,
prefill and decode rows per request, and the pre-gated predictions ``pred_scores`` (the router of
layer ``l + j`` applied to the router input of layer ``l``). :mod:`.model` loads a model (its
weights, or random ones from its ``config.json``); :mod:`.prompts` reads prompt files.
"""

from specmd_sim.record.prompts import bundled_prompts, read_prompts
from specmd_sim.record.recorder import Recording, record_trace

__all__ = ["Recording", "bundled_prompts", "read_prompts", "record_trace"]
