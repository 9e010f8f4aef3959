"""Where the real executor's tiers and compute live: a :class:`Device`.

- ``cpu``: numpy on this machine's CPU (:class:`NumpyDevice`): both tiers are process memory,
  a copy is ``numpy.copyto`` on a worker thread, compute is numpy on the calling thread.
- ``cuda``: torch on a CUDA GPU (:class:`TorchDevice`): the slow tier is pinned host memory,
  the fast tier and the compute are on the GPU; the calling thread launches the compute on its
  current stream and issues the copies to copy streams (``copy_(non_blocking=True)``), timed by
  CUDA events (:mod:`.issue`).
- ``torch-cpu``: the ``cuda`` backend's code on this CPU (torch tensors, no pinned memory, the
  host standing in for the streams: :class:`~specmd_sim.execute.issue.HostStreams`): how that
  code is tested where there is no GPU; its times are torch's on the CPU.

The operations (:class:`~specmd_sim.execute.model.Ops`, :class:`~specmd_sim.execute.model.
TorchOps`) make the same counted kernel calls on every device.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from specmd_sim.errors import SpecmdError
from specmd_sim.execute.model import NoOps, Ops, TorchOps, Weights, host_zeros

DEVICES = ("cpu", "cuda", "torch-cpu")
Copy = Callable[[Any, Any], None]  # (destination, source): returns when the bytes are there


class NumpyDevice:
    """numpy float32 on this CPU."""

    name = "cpu"
    cuda = False
    gpu_name = ""
    threaded_copies = True  # no DMA engine: a copy takes a thread of its own

    def place(self, weights: Weights) -> Weights:
        return weights

    def array(self, a: np.ndarray) -> np.ndarray:
        return a

    def zeros(self, *shape: int) -> np.ndarray:
        return host_zeros(*shape)

    def resident(self, rows: np.ndarray) -> np.ndarray:
        """Rows of the slow tier where compute reads them (here they already are)."""
        return rows

    def copy(self, dst: np.ndarray, src: np.ndarray) -> None:
        np.copyto(dst, src)

    def sync(self) -> None:
        """The compute issued so far has finished (numpy computes synchronously)."""

    def ops(self, weights: Weights, dry: bool = False) -> Ops | NoOps:
        return NoOps() if dry else Ops(weights)


class TorchDevice:
    """torch float32 on a CUDA GPU (``cuda``), or the same code on this CPU (``torch-cpu``)."""

    def __init__(self, name: str) -> None:
        torch = import_torch(name)
        self.torch, self.name = torch, name
        self.cuda = name == "cuda"
        self.threaded_copies = False  # issued by the thread that runs the model
        if self.cuda and not torch.cuda.is_available():
            raise SpecmdError(
                f"--backend: expected a CUDA GPU that torch {torch.__version__} can use, got "
                "none (torch.cuda.is_available() is false); --backend cpu runs on this CPU"
            )
        self.device = torch.device("cuda" if self.cuda else "cpu")
        self.gpu_name = torch.cuda.get_device_name(self.device) if self.cuda else ""

    def place(self, weights: Weights) -> Weights:
        """``weights`` with the model's dense parts on the device and the experts in the slow
        tier (pinned host memory on CUDA), drawn the same as on every device."""
        if weights.device == self.name:
            return weights
        slow = self.torch.from_numpy(weights.slow)  # shares the numpy array's memory
        return weights.moved(self.name, self.array, slow.pin_memory() if self.cuda else slow)

    def array(self, a: np.ndarray) -> Any:
        return self.torch.from_numpy(np.ascontiguousarray(a)).to(self.device)

    def zeros(self, *shape: int) -> Any:
        return self.torch.zeros(shape, dtype=self.torch.float32, device=self.device)

    def resident(self, rows: Any) -> Any:
        """Rows of the slow tier copied where compute reads them."""
        return rows.to(self.device)

    def copy(self, dst: Any, src: Any) -> None:
        dst.copy_(src)
        self.sync()

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.current_stream(self.device).synchronize()

    def ops(self, weights: Weights, dry: bool = False) -> TorchOps | NoOps:
        return NoOps() if dry else TorchOps(self.place(weights), self.torch)


Device = NumpyDevice | TorchDevice


def check_name(name: str, what: str = "--backend") -> None:
    """One line if ``name`` is not one of :data:`DEVICES` (``what``: the input's name)."""
    if name not in DEVICES:
        raise SpecmdError(f"{what}: expected one of {', '.join(DEVICES)}, got {name!r}")


def make_device(name: str) -> Device:
    """The device called ``name`` (one of :data:`DEVICES`)."""
    check_name(name)
    return NumpyDevice() if name == "cpu" else TorchDevice(name)


def import_torch(backend: str) -> Any:
    """torch, or one line saying how to install it."""
    try:
        import torch
    except ImportError as exc:
        raise SpecmdError(
            f"--backend {backend}: expected torch (pip install 'specmd-sim[record]'; a CUDA "
            f"build for cuda), got {exc}"
        ) from None
    return torch
