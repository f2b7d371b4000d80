"""The process-group hook of the training loop: what changes between one process, DDP and FSDP2.

The loop only talks to a `Dist` object: `wrap` the trainable module, `no_sync` during accumulation,
`all_reduce_sum` for the step's loss weight and metrics, the model / optimiser state dicts for checkpoints,
`is_main` for files. `LocalDist` (one process) is what runs today; `DDPDist` wraps with
`DistributedDataParallel` once the launcher (mtp_core.launch, submitit; not implemented here) has called
`torch.distributed.init_process_group`.

FSDP2 (paper scale, like the official HYBRID_SHARD runs, reference §1) fits the same interface:
`wrap` = `fully_shard` on every decoder layer, then on the root (student and, separately, the frozen teacher,
which the P1 step holds: `P1Step.teacher`); `no_sync` = `model.set_requires_gradient_sync(is_last)`;
`model_state_dict` / `load_model_state_dict` / `optim_state_dict` = `torch.distributed.checkpoint.state_dict`'s
`get_/set_model_state_dict` and `get_/set_optimizer_state_dict` with `StateDictOptions(full_state_dict=True,
cpu_offload=True)`; the gradient norm from `clip_grad_norm_` is a DTensor (`.full_tensor()`). Step functions
must call the wrapped module's `forward` (the P1 loss does, via `logits_to_keep`), never submodules directly.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch


class LocalDist:
    """One process: rank 0 of 1. Every hook is the identity."""

    rank = 0
    world_size = 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        return model

    def unwrap(self, model: torch.nn.Module) -> torch.nn.Module:
        return model

    @contextlib.contextmanager
    def no_sync(self, wrapped: torch.nn.Module, last: bool) -> Iterator[None]:
        """Skip gradient communication on all but the last micro-batch of a step."""
        yield

    def all_reduce_sum(self, t: torch.Tensor) -> torch.Tensor:
        return t

    def barrier(self) -> None:
        pass

    def model_state_dict(self, model: torch.nn.Module) -> dict[str, Any]:
        return self.unwrap(model).state_dict()

    def load_model_state_dict(self, model: torch.nn.Module, state: dict[str, Any]) -> None:
        self.unwrap(model).load_state_dict(state)

    def optim_state_dict(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        return optimizer.state_dict()

    def load_optim_state_dict(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, state: dict) -> None:
        optimizer.load_state_dict(state)


class DDPDist(LocalDist):
    """DistributedDataParallel over an initialised default process group (gradients averaged over ranks)."""

    def __init__(self, device_ids: list[int] | None = None, **ddp_kwargs: Any):
        import torch.distributed as dist

        if not dist.is_initialized():
            raise RuntimeError("DDPDist needs torch.distributed.init_process_group() first (the launcher's job)")
        self.rank = dist.get_rank()
        self.world_size = dist.get_world_size()
        self.device_ids = device_ids
        self.ddp_kwargs = ddp_kwargs

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        from torch.nn.parallel import DistributedDataParallel

        return DistributedDataParallel(model, device_ids=self.device_ids, **self.ddp_kwargs)

    def unwrap(self, model: torch.nn.Module) -> torch.nn.Module:
        return getattr(model, "module", model)

    def no_sync(self, wrapped: torch.nn.Module, last: bool):
        return contextlib.nullcontext() if last else wrapped.no_sync()

    def all_reduce_sum(self, t: torch.Tensor) -> torch.Tensor:
        import torch.distributed as dist

        t = t.clone()
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
        return t

    def barrier(self) -> None:
        import torch.distributed as dist

        dist.barrier()
