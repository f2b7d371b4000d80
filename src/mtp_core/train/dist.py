"""The process-group hook of the training loop: what changes between one process, DDP and FSDP2.

The loop only talks to a `Dist` object: `wrap` the trainable module (before the optimiser is built: FSDP2
replaces the parameters by sharded DTensors), `wrap_frozen` a frozen module a step function holds (P1's
teacher, P2's frozen trunk), `no_sync` during accumulation, `all_reduce_sum` for the step's loss weight and
metrics, the model / optimiser state dicts for checkpoints, `exportable` for HF exports, `is_main` for files.

* `LocalDist`: one process, every hook the identity.
* `DDPDist`: `DistributedDataParallel` over an initialised default process group (the launcher,
  `mtp_core.train.launch`, initialises it from submitit's `TorchDistributedEnvironment`; gloo on CPU, NCCL on
  GPU). A frozen module is replicated as it is (it never receives gradients).
* `FSDPDist`: FSDP2 (`torch.distributed.fsdp.fully_shard`) on every decoder layer (HF `_no_split_modules`, or
  the children of the model's `ModuleList`s), then on the root; a submodule whose parameters have another dtype
  than the rest of its unit (GLM-4-MoE's float32 router in a bf16 model) is a unit of its own, gathered in its
  own dtype (`odd_dtype_modules`). `no_sync` = `set_requires_gradient_sync(last)`;
  state dicts are the full (unsharded, CPU) ones of `torch.distributed.checkpoint.state_dict`, converted to the
  layout of `optimizer.state_dict()`, so a checkpoint written by any of the three resumes under any other (and
  under another process count). HF exports gather the full weights into an unsharded twin of the model on rank 0
  (a meta-device copy made at `wrap`, so it costs no memory between exports). `replicate > 1` gives HSDP (the
  official HYBRID_SHARD): a 2-D mesh, replicated across `replicate` groups and sharded within each. bf16: the
  loop's autocast (`precision`), and optionally `param_dtype` / `reduce_dtype` (FSDP2's `MixedPrecisionPolicy`).

In every strategy the gradients are averaged over ranks (DDP all-reduce, FSDP reduce-scatter), which the loop
undoes (x world / total weight), so a step's update is the token-weighted mean over the global batch whatever
the process count.

**What a step function may call under FSDP2.** A sharded unit gathers its weights in its own forward, so:
* the trained module: call the wrapped module's `forward` (the P1 loss does; P2's model computes its loss inside
  its forward). Its root-level parameters (those in no unit: an HF model's embedding, final norm and lm_head)
  are gathered in that forward and again at the start of its backward, so the forward may use them directly,
  also in a `torch.utils.checkpoint` region its backward recomputes; its units only through their own forward.
* a frozen module (`wrap_frozen`): its units (decoder layers) are sharded, each gathered in its own forward
  and freed after it (it is its own FSDP root: no root forward is needed, so a step may run the module's
  forward, or its inner model's, or its layers one by one); its other parameters (embedding, final norm,
  lm_head, rotary buffers: frozen, so no gradient sync is needed) stay whole and replicated on every rank, so
  a step may call them directly, e.g. the trunk's lm_head and embedding on draft heads' states (P2).
* a module the trained model reads without registering it (P2's frozen trunk): the twin of `exportable` shares
  it, never copies it (`_meta_twin`).
"""

from __future__ import annotations

import collections
import contextlib
import copy
import datetime
import logging
import os
from collections.abc import Iterator
from typing import Any

import torch

log = logging.getLogger(__name__)

STRATEGIES = ("auto", "none", "ddp", "fsdp")


class LocalDist:
    """One process: rank 0 of 1. Every hook is the identity."""

    rank = 0
    world_size = 1
    local_rank = 0
    name = "none"

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        return model

    def unwrap(self, model: torch.nn.Module) -> torch.nn.Module:
        return model

    def wrap_frozen(self, module: torch.nn.Module) -> torch.nn.Module:
        """A frozen module a step function holds (P1's teacher, P2's frozen trunk): as it is."""
        return module

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

    @contextlib.contextmanager
    def exportable(self, model: torch.nn.Module) -> Iterator[torch.nn.Module | None]:
        """The plain module holding the full weights, on the main process (None elsewhere); every rank enters."""
        yield self.unwrap(model) if self.is_main else None


class DDPDist(LocalDist):
    """DistributedDataParallel over an initialised default process group (gradients averaged over ranks)."""

    name = "ddp"

    def __init__(self, device_ids: list[int] | None = None, **ddp_kwargs: Any):
        import torch.distributed as dist

        if not dist.is_initialized():
            raise RuntimeError("DDPDist needs torch.distributed.init_process_group() first (the launcher's job)")
        self.rank = dist.get_rank()
        self.world_size = dist.get_world_size()
        self.local_rank = int(os.environ.get("LOCAL_RANK", self.rank))
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


def shard_units(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The submodules FSDP2 shards one by one (then the root): HF decoder layers (`_no_split_modules`), else
    every child of the model's `ModuleList`s (a stack of heads, blocks ...)."""
    names = set(getattr(model, "_no_split_modules", None) or ())
    if names:
        units = [m for m in model.modules() if m is not model and type(m).__name__ in names]
        if units:
            return units
    return [c for m in model.modules() if isinstance(m, torch.nn.ModuleList) for c in m.children()]


def odd_dtype_modules(unit: torch.nn.Module) -> list[torch.nn.Module]:
    """The submodules of `unit` whose own parameters have another dtype than most of the unit's not yet sharded
    parameters. FSDP2 gathers a unit's parameters in one collective and wants one dtype for its trainable ones;
    transformers keeps some parameters of a bf16 model in float32 (GLM-4-MoE's router, `mlp.gate.weight`:
    `_keep_in_fp32_modules_strict`), so those become units of their own."""
    from torch.distributed.tensor import DTensor

    own = [p for p in unit.parameters() if not isinstance(p, DTensor)]
    if not own:
        return []
    counts = collections.Counter(p.dtype for p in own)
    main = max(counts, key=lambda d: counts[d])
    return [
        m
        for m in unit.modules()
        if m is not unit and any(not isinstance(p, DTensor) and p.dtype != main for p in m.parameters(recurse=False))
    ]


def _meta_twin(model: torch.nn.Module) -> torch.nn.Module:
    """A deep copy of what `model` owns (its registered parameters, on the meta device: no memory; its buffers,
    copied as they are). A module it references without registering it (P2's trunk, read at call time) is not the
    model's: it is shared with the twin, or, when some of its submodules are registered in the model (P2's
    `last_layers`: the trunk's last layers and final norm train), copied module by module with its other
    parameters shared, so that the twin's reference sees the twin's copies of the trained parts."""
    owned = {id(p) for p in model.parameters()}
    memo: dict[int, Any] = {}
    for p in model.parameters():
        memo[id(p)] = torch.nn.Parameter(torch.empty_like(p, device="meta"), requires_grad=p.requires_grad)
    registered = {id(m) for m in model.modules()}
    for m in model.modules():
        for ref in vars(m).values():
            if not isinstance(ref, torch.nn.Module) or id(ref) in registered:
                continue
            if not any(id(p) in owned for p in ref.parameters()):
                memo[id(ref)] = ref
            else:
                memo.update({id(p): p for p in ref.parameters() if id(p) not in owned})
    return copy.deepcopy(model, memo)


def _tie(model: torch.nn.Module) -> None:
    """Re-tie the input and output embeddings of every HF model in `model` (a state-dict load with `assign`
    gives tied weights one tensor each)."""
    for m in model.modules():
        output = getattr(m, "get_output_embeddings", None)
        if callable(getattr(m, "tie_weights", None)) and callable(output) and output() is not None:
            m.tie_weights()


def _optim_to_index(state: dict[str, Any]) -> dict[str, Any]:
    """A full optimiser state keyed by parameter names -> the `optimizer.state_dict()` layout (0, 1, ... in
    param-group order)."""
    index: dict[str, int] = {}
    groups = []
    for g in state["param_groups"]:
        ids = []
        for name in g["params"]:
            index.setdefault(name, len(index))
            ids.append(index[name])
        groups.append({**g, "params": ids})
    return {"state": {index[k]: v for k, v in state["state"].items()}, "param_groups": groups}


class FSDPDist(DDPDist):
    """FSDP2 (`fully_shard`) over an initialised default process group (module docstring).

    `replicate`: HSDP replica groups (world = replicate x shard); `param_dtype` / `reduce_dtype`: FSDP2 mixed
    precision (e.g. torch.bfloat16 / torch.float32); `reshard_after_forward`: free the gathered layer after its
    forward (ZeRO-3; False keeps it until backward, ZeRO-2-like).
    """

    name = "fsdp"

    def __init__(
        self,
        device_type: str = "cpu",
        replicate: int = 1,
        param_dtype: torch.dtype | None = None,
        reduce_dtype: torch.dtype | None = None,
        reshard_after_forward: bool = True,
    ):
        super().__init__()
        from torch.distributed.device_mesh import init_device_mesh

        if replicate < 1 or self.world_size % replicate:
            raise ValueError(f"fsdp: replicate={replicate} does not divide the world size {self.world_size}")
        if replicate > 1:
            self.mesh = init_device_mesh(
                device_type, (replicate, self.world_size // replicate), mesh_dim_names=("replicate", "shard")
            )
        else:
            self.mesh = init_device_mesh(device_type, (self.world_size,))
        self.param_dtype, self.reduce_dtype = param_dtype, reduce_dtype
        self.reshard_after_forward = reshard_after_forward
        self._twins: dict[int, torch.nn.Module] = {}

    def _shard_kwargs(self) -> dict[str, Any]:
        from torch.distributed.fsdp import MixedPrecisionPolicy

        kw: dict[str, Any] = {"mesh": self.mesh, "reshard_after_forward": self.reshard_after_forward}
        if self.param_dtype is not None or self.reduce_dtype is not None:
            kw["mp_policy"] = MixedPrecisionPolicy(param_dtype=self.param_dtype, reduce_dtype=self.reduce_dtype)
        return kw

    def _shard_unit(self, unit: torch.nn.Module, kw: dict[str, Any]) -> None:
        """`fully_shard(unit)`, after its submodules of another dtype (`odd_dtype_modules`) as units of their own,
        gathered in their own dtype (no `param_dtype` cast: they stay as precise as their model keeps them)."""
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        for sub in odd_dtype_modules(unit):
            fully_shard(sub, **{**kw, "mp_policy": MixedPrecisionPolicy(reduce_dtype=self.reduce_dtype)})
        fully_shard(unit, **kw)

    def _shard(self, model: torch.nn.Module) -> torch.nn.Module:
        kw = self._shard_kwargs()
        for unit in shard_units(model):
            self._shard_unit(unit, kw)
        self._shard_unit(model, kw)
        return model

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        self._twins[id(model)] = _meta_twin(model)
        return self._shard(model)

    def unwrap(self, model: torch.nn.Module) -> torch.nn.Module:
        return model

    def wrap_frozen(self, module: torch.nn.Module) -> torch.nn.Module:
        """Shard the units of a frozen module (each its own FSDP root, freed after its forward whatever
        `reshard_after_forward` says: no backward ever frees it); its other parameters stay whole on every rank
        (module docstring)."""
        if any(p.requires_grad for p in module.parameters()):
            raise ValueError("wrap_frozen: the module has trainable parameters (freeze it first)")
        kw = {**self._shard_kwargs(), "reshard_after_forward": True}
        for unit in shard_units(module):
            self._shard_unit(unit, kw)
        return module

    @contextlib.contextmanager
    def no_sync(self, wrapped: torch.nn.Module, last: bool) -> Iterator[None]:
        wrapped.set_requires_gradient_sync(last)
        try:
            yield
        finally:
            wrapped.set_requires_gradient_sync(True)

    @staticmethod
    def _options(**kw: Any):
        from torch.distributed.checkpoint.state_dict import StateDictOptions

        return StateDictOptions(full_state_dict=True, **kw)

    def model_state_dict(self, model: torch.nn.Module) -> dict[str, Any]:
        from torch.distributed.checkpoint.state_dict import get_model_state_dict

        return get_model_state_dict(model, options=self._options(cpu_offload=True))

    def load_model_state_dict(self, model: torch.nn.Module, state: dict[str, Any]) -> None:
        from torch.distributed.checkpoint.state_dict import set_model_state_dict

        set_model_state_dict(model, state, options=self._options())

    def _param_names(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> list[str]:
        names = {id(p): n for n, p in model.named_parameters()}
        return [names[id(p)] for g in optimizer.param_groups for p in g["params"]]

    def optim_state_dict(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

        full = get_optimizer_state_dict(model, optimizer, options=self._options(cpu_offload=True))
        return _optim_to_index(full) if self.is_main else {}

    def load_optim_state_dict(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, state: dict) -> None:
        from torch.distributed.checkpoint.state_dict import set_optimizer_state_dict

        names = self._param_names(model, optimizer)
        by_name = {
            "state": {names[int(i)]: v for i, v in state["state"].items()},
            "param_groups": [{**g, "params": [names[int(i)] for i in g["params"]]} for g in state["param_groups"]],
        }
        set_optimizer_state_dict(model, optimizer, by_name, options=self._options())

    @contextlib.contextmanager
    def exportable(self, model: torch.nn.Module) -> Iterator[torch.nn.Module | None]:
        full = self.model_state_dict(model)  # collective: every rank gathers, rank 0 keeps the CPU copy
        if not self.is_main:
            yield None
            return
        twin = self._twins[id(model)]
        twin.load_state_dict(full, assign=True)
        _tie(twin)
        try:
            yield twin
        finally:
            twin.to("meta")  # frees the gathered weights until the next export (not the modules it only shares)


def make_dist(strategy: str = "auto", device: torch.device | None = None, **kwargs: Any) -> LocalDist:
    """The `Dist` for `strategy` (auto: DDP when a process group of > 1 ranks is up, else one process)."""
    import torch.distributed as dist

    if strategy not in STRATEGIES:
        raise ValueError(f"strategy {strategy!r} is not one of {', '.join(STRATEGIES)}")
    up = dist.is_available() and dist.is_initialized()
    if strategy == "none" or (strategy == "auto" and not (up and dist.get_world_size() > 1)):
        return LocalDist()
    if not up:
        raise RuntimeError(f"strategy {strategy!r} needs an initialised process group")
    dev = device or torch.device("cpu")
    if strategy == "fsdp":
        return FSDPDist(device_type=dev.type, **kwargs)
    return DDPDist(device_ids=[dev.index or 0] if dev.type == "cuda" else None, **kwargs)


def init_process_group(backend: str = "auto", device: torch.device | None = None, timeout_min: float = 30.0) -> str:
    """`torch.distributed.init_process_group` from the env:// variables (MASTER_ADDR/PORT, RANK, WORLD_SIZE, as
    submitit's `TorchDistributedEnvironment().export()` sets them); backend auto = NCCL on CUDA, else gloo."""
    import torch.distributed as dist

    if backend == "auto":
        backend = "nccl" if device is not None and device.type == "cuda" else "gloo"
    kw: dict[str, Any] = {}
    if backend == "nccl" and device is not None and device.type == "cuda":
        kw["device_id"] = device
    dist.init_process_group(backend, init_method="env://", timeout=datetime.timedelta(minutes=timeout_min), **kw)
    log.info(
        "process group up: rank %d of %d (%s, master %s:%s)",
        dist.get_rank(),
        dist.get_world_size(),
        backend,
        os.environ.get("MASTER_ADDR"),
        os.environ.get("MASTER_PORT"),
    )
    return backend
