"""Load the model to record: its weights (a local folder or a hub id ``from_pretrained`` takes),
or random weights built from its ``config.json`` (no download; what the tests and a dry run of
a model one cannot fetch use). Random-weight models have no tokenizer: prompts become their
UTF-8 bytes (modulo the vocabulary), which routes like any other token sequence."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specmd_sim.errors import SpecmdError
from specmd_sim.models.hf_config import FAMILIES, read_hf_config

DTYPES = ("auto", "fp32", "bf16", "fp16")


def import_torch() -> tuple[Any, Any]:
    """``(torch, transformers)``, or one line saying how to install them."""
    try:
        import torch
        import transformers
    except ImportError as exc:
        raise SpecmdError(
            "trace record: expected torch and transformers (pip install 'specmd-sim[record]'), "
            f"got {exc}"
        ) from None
    return torch, transformers


@dataclass(frozen=True, eq=False)
class LoadedModel:
    model: Any  # a transformers causal LM in eval mode
    encode: Any  # str -> list[int]
    ref: str  # what it was loaded from
    random_weights: bool


def load_hf_model(
    ref: str, *, random_weights: bool, dtype: str = "auto", seed: int = 0
) -> LoadedModel:
    """The model ``ref`` (a folder, a ``config.json`` with ``random_weights``, or a hub id)."""
    torch, transformers = import_torch()
    if dtype not in DTYPES:
        raise SpecmdError(f"--dtype: expected one of {', '.join(DTYPES)}, got {dtype!r}")
    torch_dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}.get(dtype)
    if random_weights:
        config = _config(ref, transformers)
        torch.manual_seed(seed)
        model = transformers.AutoModelForCausalLM.from_config(config)
        if torch_dtype is not None:
            model = model.to(torch_dtype)
        vocab = int(config.vocab_size)
        return LoadedModel(model.eval(), lambda text: _bytes(text, vocab), ref, True)
    if Path(ref).is_file():  # (a config.json has no weights: the hub is not asked for them)
        raise SpecmdError(
            f"--model: expected a model folder or hub id, got the file {ref!r}; a config.json "
            "is recorded with --random-weights"
        )
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(ref)
        model = transformers.AutoModelForCausalLM.from_pretrained(ref, dtype=torch_dtype or "auto")
    except (OSError, ValueError) as exc:
        raise SpecmdError(
            f"--model: expected a model folder or hub id from_pretrained can load, got {ref!r} "
            f"({str(exc).splitlines()[0]}); --random-weights records a config.json's model "
            "with random weights"
        ) from None
    return LoadedModel(model.eval(), lambda text: tokenizer(text)["input_ids"], ref, False)


def read_config(ref: str) -> dict[str, Any]:
    """The ``config.json`` at ``ref`` (the file, or the folder holding it) as a dict."""
    path = Path(ref)
    if path.is_dir():
        path = path / "config.json"
    data = read_hf_config(path)
    if not isinstance(data, dict) or "model_type" not in data:
        raise SpecmdError(f"--model: {path}: expected a JSON object with 'model_type'")
    return data


def _config(ref: str, transformers: Any) -> Any:
    data = read_config(ref)
    model_type = data.pop("model_type")
    if model_type not in FAMILIES:
        raise SpecmdError(
            f"--model: {ref}: model_type expected one of {', '.join(FAMILIES)}, got {model_type!r}"
        )
    for key in ("architectures", "transformers_version", "_name_or_path"):
        data.pop(key, None)
    return transformers.AutoConfig.for_model(model_type, **data)


def _bytes(text: str, vocab: int) -> list[int]:
    return [b % vocab for b in text.encode("utf-8")] or [0]
