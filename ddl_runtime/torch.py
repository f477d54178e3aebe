"""PyTorch integration: data-parallel training on top of ``ddl_runtime``.

The four changes that make a single-process script data-parallel::

    import ddl_runtime.torch as ddl

    ddl.init()
    sampler = ddl.ShardSampler(len(train_set), shuffle=True, seed=0)     # 1. shard the data
    loader = DataLoader(train_set, batch_size=64, sampler=sampler)
    opt = torch.optim.SGD(model.parameters(), lr=ddl.scale_lr(0.05))   # 2. scale the lr
    opt = ddl.DistributedOptimizer(opt, named_parameters=model.named_parameters())  # 3. average grads
    ddl.broadcast_parameters(model.state_dict(), root_rank=0)          # 4. same start
    ddl.broadcast_optimizer_state(opt, root_rank=0)

Gradients are averaged with the runtime's aggregated allreduce (``allreduce_n_async``).  The
reductions start from post-accumulate-grad hooks while ``backward()`` is still running, one
bucket of gradients at a time, so communication overlaps the rest of the backward pass;
``step()`` waits for them.

Everything that must agree across ranks (parameter names, shapes, dtypes, optimizer parameter
groups) is compared with a cheap signature exchange *before* any data moves, so a mismatch is
a :class:`~ddl_runtime.errors.DDLError` naming the parameter on every rank, never a hang.  A
gradient that is ``None`` on some ranks only is detected inside the same reduction that averages
the gradients (each bucket carries one presence flag per parameter), so it costs no extra
collective and also raises on every rank.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import tempfile
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch

import ddl_runtime as _ddl
from ddl_runtime.collectives.basics import init, is_root, local_rank, rank, scale_lr, size
from ddl_runtime.checkpoint import stop as _stop
from ddl_runtime.checkpoint.torch import Checkpointer
from ddl_runtime.collectives.crossrank import check_consistent as _check_consistent
from ddl_runtime.errors import DDLError
from ddl_runtime.state import runtime as _runtime
from ddl_runtime.transports.gpu.hostcopy import to_host

try:  # a more specific type when the core runtime provides it
    from ddl_runtime.errors import DDLMismatchError as _MismatchError
except ImportError:  # pragma: no cover - older core
    _MismatchError = DDLError

try:
    from ddl_runtime.errors import DDLInputError as _InputError
except ImportError:  # pragma: no cover - older core
    _InputError = DDLError

__all__ = [
    "init",
    "rank",
    "size",
    "local_rank",
    "is_root",
    "scale_lr",
    "DistributedOptimizer",
    "broadcast_parameters",
    "broadcast_optimizer_state",
    "ShardSampler",
    "shard_indices",
    "metric_average",
    "parameters_max_divergence",
    "log",
    "save_checkpoint",
    "Checkpointer",
]

_DEFAULT_BUCKET_MB = 4.0
# dtypes the runtime moves as they are
_WIRE_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int32, torch.int64)


# --------------------------------------------------------------------------------------------
# basics


def log(*args: Any, file=None, **kwargs: Any) -> None:
    """``print`` on the root rank only (flushed, so it reaches log files promptly)."""
    if is_root():
        kwargs.setdefault("flush", True)
        print(*args, file=file if file is not None else sys.stdout, **kwargs)


def save_checkpoint(obj: Any, path: Union[str, os.PathLike], root_rank: int = 0) -> bool:
    """``torch.save`` on the root rank only, atomically (temp file + rename).

    Safe to call from every rank (the others do nothing) or from the root alone; it does not
    communicate.  Returns True where the file was written.
    """
    if rank() != root_rank:
        return False
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".ckpt-", dir=directory)
    try:
        with os.fdopen(fd, "wb") as fh:
            torch.save(obj, fh)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return True


def _as_tensor_result(result: Any, like: torch.Tensor) -> torch.Tensor:
    if isinstance(result, torch.Tensor):
        return result
    return torch.as_tensor(np.asarray(result)).view(like.shape).to(like.dtype)


# --------------------------------------------------------------------------------------------
# broadcasts


def _named_tensors(params: Any, what: str) -> List[Tuple[str, torch.Tensor]]:
    if isinstance(params, torch.nn.Module):
        raise _InputError(
            "broadcast_parameters: pass model.state_dict() or model.named_parameters(), "
            "not the module itself"
        )
    if isinstance(params, dict):
        items = list(params.items())
    else:
        items = list(params)
    out: List[Tuple[str, torch.Tensor]] = []
    for i, item in enumerate(items):
        if isinstance(item, torch.Tensor):
            name, tensor = f"{what}[{i}]", item
        else:
            try:
                name, tensor = item
            except (TypeError, ValueError):
                raise _InputError(
                    f"broadcast_parameters: item {i} is {type(item).__name__}; expected "
                    f"(name, tensor) pairs, a state_dict or tensors"
                ) from None
        if not isinstance(tensor, torch.Tensor):
            raise _InputError(
                f"broadcast_parameters: {what} {name!r} is a {type(tensor).__name__}, not a tensor"
            )
        out.append((str(name), tensor))
    return out


def _describe(t: torch.Tensor) -> str:
    return f"shape {tuple(t.shape)} dtype {str(t.dtype).replace('torch.', '')}"


def broadcast_parameters(params: Any, root_rank: int = 0) -> None:
    """Copy the root's values into every rank's tensors, in place.

    ``params``: ``model.state_dict()``, ``model.named_parameters()`` or a list of tensors.
    Names, shapes and dtypes are compared across ranks first; a mismatch raises a DDLError
    naming the parameter on every rank.  Tensors are packed into one buffer per dtype, so this
    is one broadcast per dtype, not one per tensor.
    """
    init()
    if not 0 <= root_rank < size():
        raise _InputError(f"broadcast_parameters: root_rank={root_rank} is not a rank (size {size()})")
    items = _named_tensors(params, "parameter")
    _check_consistent("parameter", [n for n, _ in items], [_describe(t) for _, t in items])
    if size() == 1:
        return
    by_dtype: Dict[torch.dtype, List[torch.Tensor]] = {}
    for _, t in items:
        by_dtype.setdefault(t.dtype, []).append(t)
    with torch.no_grad():
        for dtype in sorted(by_dtype, key=str):
            tensors = by_dtype[dtype]
            flat = torch.cat([t.detach().reshape(-1).cpu() for t in tensors]) if tensors else None
            if flat is None or flat.numel() == 0:
                continue
            if dtype not in _WIRE_DTYPES:
                if dtype.is_floating_point or dtype.is_complex:
                    raise _InputError(
                        f"broadcast_parameters: dtype {dtype} is not supported "
                        f"(first tensor of that dtype: {next(n for n, t in items if t.dtype == dtype)!r})"
                    )
                flat = flat.to(torch.int64)  # bool and small integers travel exactly as int64
            result = _ddl.bcast(flat, root=root_rank)
            if result is not None and result is not flat:
                flat = _as_tensor_result(result, flat)
            offset = 0
            for t in tensors:
                n = t.numel()
                t.copy_(flat[offset:offset + n].view(t.shape).to(t.dtype))
                offset += n


def _check_optimizer_consistent(optimizer: torch.optim.Optimizer,
                                names: Optional[Dict[torch.Tensor, str]] = None,
                                options: bool = True) -> None:
    """Compare an optimizer's param groups (count, sizes, options) and parameters across ranks."""
    groups = optimizer.param_groups
    _check_consistent(
        "optimizer param group",
        [f"param_groups[{g}]" for g in range(len(groups))],
        [f"{len(group['params'])} parameters, options {sorted(k for k in group if k != 'params')}"
         for group in groups],
    )
    if options:
        keys = [(g, k) for g, group in enumerate(groups) for k in sorted(group) if k != "params"]
        _check_consistent("optimizer option", [f"param_groups[{g}].{k}" for g, k in keys],
                          [repr(groups[g][k]) for g, k in keys])
    item_names: List[str] = []
    descs: List[str] = []
    for g, group in enumerate(groups):
        for i, p in enumerate(group["params"]):
            label = names.get(p) if names else None
            item_names.append(label or f"param_groups[{g}].params[{i}]")
            descs.append(f"group {g}, {_describe(p)}, requires_grad={p.requires_grad}")
    _check_consistent("optimizer parameter", item_names, descs)


def broadcast_optimizer_state(optimizer: torch.optim.Optimizer, root_rank: int = 0) -> None:
    """Give every rank the root's optimizer state and hyperparameters (``state_dict``).

    Parameter groups are compared across ranks first (a mismatch names the group or parameter).
    The root's ``state_dict()`` is serialised once and broadcast as bytes, so state that exists
    only on the root (e.g. loaded from a checkpoint) reaches the other ranks too.
    """
    init()
    inner = optimizer
    if not isinstance(inner, torch.optim.Optimizer):
        raise _InputError(
            f"broadcast_optimizer_state: optimizer is a {type(optimizer).__name__}, not a torch.optim.Optimizer"
        )
    # Compare the group structure only: options such as lr may legitimately differ before
    # the broadcast (e.g. when only the root loaded a checkpoint); the broadcast sets them.
    _check_optimizer_consistent(inner, options=False)
    if size() == 1:
        return
    payload = None
    if rank() == root_rank:
        buf = io.BytesIO()
        torch.save(to_host(inner.state_dict()), buf)  # CUDA state: host copies (loaded onto each parameter's device)
        payload = buf.getvalue()
    payload = _ddl.bcast_object(payload, root=root_rank)
    if rank() != root_rank:
        state = torch.load(io.BytesIO(payload), weights_only=False, map_location="cpu")
        inner.load_state_dict(state)


# --------------------------------------------------------------------------------------------
# data sharding


def shard_indices(n: int, *, shuffle: bool = False, seed: int = 0, epoch: int = 0,
                  drop_last: bool = False, rank_: Optional[int] = None,
                  size_: Optional[int] = None) -> List[int]:
    """This rank's indices of ``range(n)``; every rank gets the same number of them.

    One permutation (seeded by ``seed + epoch``, identical on all ranks) is padded by wrapping
    around (or trimmed, ``drop_last=True``) to a multiple of ``size()`` and dealt out
    round-robin, so global batch k of ``size()`` ranks holds the same samples as batch k of one
    rank with a ``size()`` times larger batch.  Equal lengths keep the ranks in lock step: a
    rank with one batch more would wait forever in its extra allreduce.
    """
    r = rank() if rank_ is None else rank_
    s = size() if size_ is None else size_
    if n <= 0:
        raise _InputError(f"shard_indices: n={n}: nothing to shard")
    if shuffle:
        g = torch.Generator()
        g.manual_seed(int(seed) + int(epoch))
        order = torch.randperm(n, generator=g).tolist()
    else:
        order = list(range(n))
    if drop_last:
        order = order[: n - n % s]
        if not order:
            raise _InputError(f"shard_indices: {n} samples cannot give {s} ranks one each (drop_last=True)")
    else:
        pad = (-n) % s
        while pad:
            take = order[: min(pad, n)]
            order = order + take
            pad -= len(take)
    return order[r::s]


class ShardSampler(torch.utils.data.Sampler):
    """A ``DataLoader`` sampler that gives each rank its share of the data.

    ``ShardSampler(len(dataset), shuffle=True, seed=0)``; call ``set_epoch(epoch)`` each epoch
    to reshuffle (same permutation on every rank).  Every rank gets ``ceil(n / size())``
    indices (``floor`` with ``drop_last=True``).
    """

    def __init__(self, data_source: Union[int, Sequence[Any]], *, shuffle: bool = True,
                 seed: int = 0, drop_last: bool = False) -> None:
        self.n = int(data_source) if isinstance(data_source, int) else len(data_source)
        self.shuffle = shuffle
        self.seed = seed
        self.drop_last = drop_last
        self.epoch = 0
        self._rank = rank()
        self._size = size()
        if self.n <= 0:
            raise _InputError("ShardSampler: the dataset is empty")

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __iter__(self) -> Iterator[int]:
        return iter(shard_indices(self.n, shuffle=self.shuffle, seed=self.seed, epoch=self.epoch,
                                  drop_last=self.drop_last, rank_=self._rank, size_=self._size))

    def __len__(self) -> int:
        if self.drop_last:
            return self.n // self._size
        return -(-self.n // self._size)


# --------------------------------------------------------------------------------------------
# metrics and checks


def metric_average(value: Union[float, torch.Tensor, np.ndarray], name: str = "metric") -> float:
    """The mean of a scalar over all ranks (every rank must call it)."""
    v = float(value.item() if hasattr(value, "item") else value)
    if size() == 1:
        return v
    out = _ddl.allreduce(np.array([v], dtype=np.float64), op="sum")
    return float(np.asarray(out).reshape(-1)[0]) / size()


def parameters_max_divergence(params: Any) -> float:
    """The largest element-wise difference of the parameters between any two ranks.

    0.0 means every rank holds bit-identical values.  ``params``: a module, its
    ``state_dict()``, ``named_parameters()`` or a list of tensors.  Two small-ish allreduces
    (max and min of all values).
    """
    if isinstance(params, torch.nn.Module):
        params = params.state_dict()
    items = _named_tensors(params, "parameter")
    _check_consistent("parameter", [n for n, _ in items], [_describe(t) for _, t in items])
    floats = [t.detach().reshape(-1).to(torch.float64) for _, t in items if t.numel()]
    if size() == 1 or not floats:
        return 0.0
    flat = torch.cat(floats).cpu().numpy()  # CUDA parameters: one device-to-host copy
    hi = np.asarray(_ddl.allreduce(flat.copy(), op="max"))
    lo = np.asarray(_ddl.allreduce(flat.copy(), op="min"))
    diff = hi - lo
    if np.isnan(diff).any():
        return float("nan")
    return float(diff.max()) if diff.size else 0.0


# --------------------------------------------------------------------------------------------
# the distributed optimizer


class _Bucket:
    __slots__ = ("index", "params", "dtype", "ready", "handle", "launched", "flags", "present", "names",
                 "flat", "views", "stop_slot")

    def __init__(self, index: int, params: List[torch.Tensor], names: List[str], stop_slot: bool = False) -> None:
        self.index = index
        self.params = params
        self.dtype = params[0].dtype
        self.ready = 0
        self.handle = None
        self.launched = False
        # The last bucket launched carries the stop agreement (ddl_runtime.checkpoint.stop): one
        # more flag, 1.0 = go on (so fill_(1.0) keeps costing what it did), 0.0 = stop requested.
        self.stop_slot = stop_slot
        # one presence flag per parameter, reduced with the gradients (reused every step)
        self.flags = torch.ones(len(params) + stop_slot, dtype=self.dtype, device=params[0].device)
        self.present: List[bool] = []
        self.names = [f"grad:{n}" for n in names] + [f"grad-flags:{index}"]
        self.flat: Any = None  # a FlatAllreduce: see flatten()
        self.views: Dict[int, tuple] = {}

    def flatten(self, op: str) -> None:
        """Reduce this bucket as ONE flat array (ddl_runtime.collectives.flat_allreduce.FlatAllreduce): every
        gradient and then the presence flags (its tail).  Each step copies the fresh gradients
        into the array it hands out (on one host, this rank's slot in the shared-memory arena)
        with one torch op, and the reduced values back out with another; nothing is validated
        per step.  For small CPU buckets, where a latency-bound step pays for per-tensor work and
        for every pass over the bucket."""
        from ddl_runtime.collectives.flat_allreduce import FlatAllreduce

        sizes = [p.numel() for p in self.params]
        np_dtype = np.float32 if self.dtype == torch.float32 else np.float64
        name = (f"grad-bucket:{self.index}[{len(sizes)} gradients, first "
                f"{self.names[0][len('grad:'):]!r}, {sum(sizes) + len(sizes)} elements]")
        self.flat = FlatAllreduce(sum(sizes) + len(sizes) + self.stop_slot, np_dtype, name, op=op)
        self.views = {}

    def views_of(self, array: np.ndarray) -> Tuple[List[torch.Tensor], torch.Tensor]:
        """Torch views of a FlatAllreduce array: one per gradient, then the flags (made once per
        array; the reduction hands out the same few arrays every step)."""
        got = self.views.get(id(array))
        if got is None or got[0] is not array:
            flat = torch.from_numpy(array)
            sizes = [p.numel() for p in self.params]
            pieces = flat.split(sizes + [len(sizes) + self.stop_slot])
            got = self.views[id(array)] = (array, [piece.view(p.shape) for piece, p in zip(pieces, self.params)],
                                           pieces[-1])
        return got[1], got[2]


def _flattens(bucket: _Bucket) -> bool:
    """Whether a bucket is reduced as one flat tensor (_Bucket.flatten): CPU float32/float64
    gradients of at most the one-barrier small path's size (ddl_runtime.transports.shm.group.SMALL_BYTES)."""
    from ddl_runtime.transports.shm.group import SMALL_BYTES

    nbytes = (sum(p.numel() for p in bucket.params) + len(bucket.params) + bucket.stop_slot) * bucket.params[0].element_size()
    return (bucket.dtype in (torch.float32, torch.float64) and bucket.params[0].device.type == "cpu"
            and nbytes <= SMALL_BYTES and os.environ.get("DDL_FLAT_BUCKETS", "1") != "0")


def _one_host_shared_memory() -> bool:
    from ddl_runtime.state import runtime  # not at import: that would start MPI

    return runtime.current().shm is not None


class _DistributedOptimizerMixin:
    """Methods added to the wrapped optimizer's own class (see DistributedOptimizer)."""

    # set up by _ddl_setup
    _ddl_names: Dict[torch.Tensor, str]
    _ddl_buckets: List[_Bucket]
    _ddl_bucket_of: Dict[torch.Tensor, _Bucket]
    _ddl_counts: Dict[torch.Tensor, int]

    def _ddl_setup(self, named_parameters, op: str, backward_passes_per_step: int,
                   bucket_mb: Optional[float], gradient_as_bucket_view: bool = False) -> None:
        if op not in ("avg", "sum"):
            raise _InputError(f"DistributedOptimizer: op={op!r}; expected 'avg' or 'sum'")
        if int(backward_passes_per_step) < 1:
            raise _InputError(
                f"DistributedOptimizer: backward_passes_per_step={backward_passes_per_step}; expected >= 1"
            )
        init()
        self._ddl_stats = _runtime.current().stats   # each step's time, wait and bytes (core/stats.py)
        self._ddl_op = op
        self._ddl_passes = int(backward_passes_per_step)
        self._ddl_size = size()
        all_params = [p for group in self.param_groups for p in group["params"]]
        seen = set()
        for p in all_params:
            if id(p) in seen:
                raise _InputError("DistributedOptimizer: a parameter appears in more than one param group")
            seen.add(id(p))

        names: Dict[torch.Tensor, str] = {}
        if named_parameters is not None:
            pairs = list(named_parameters)
            if pairs and not (isinstance(pairs[0], tuple) and len(pairs[0]) == 2):
                raise _InputError(
                    "DistributedOptimizer: named_parameters must be (name, parameter) pairs, "
                    "e.g. model.named_parameters()"
                )
            by_id = {}
            for n, p in pairs:
                if n in by_id.values():
                    raise _InputError(f"DistributedOptimizer: named_parameters has the name {n!r} twice")
                by_id[id(p)] = n
            missing = [p for p in all_params if id(p) not in by_id]
            if missing:
                raise _InputError(
                    f"DistributedOptimizer: named_parameters lacks {len(missing)} of the optimizer's "
                    f"parameters (first: shape {tuple(missing[0].shape)}); pass the model's "
                    f"named_parameters() covering every optimized parameter"
                )
            for p in all_params:
                names[p] = by_id[id(p)]
        else:
            for g, group in enumerate(self.param_groups):
                for i, p in enumerate(group["params"]):
                    names[p] = f"param_groups[{g}].params[{i}]"
        self._ddl_names = names

        # Every rank must optimize the same parameters with the same groups and options.
        self._ddl_check_consistent(names)

        # Buckets: gradients arrive roughly in reverse order of the parameters, so fill buckets
        # from the back. Buckets are fixed here, identical on all ranks, and launched strictly in
        # index order, so all ranks issue the same reductions in the same order.
        if bucket_mb is None:
            env = os.environ.get("DDL_FUSION_MB")
            try:
                bucket_mb = float(env) if env else _DEFAULT_BUCKET_MB
            except ValueError:
                raise _InputError(f"DDL_FUSION_MB={env!r} is not a number of megabytes") from None
        limit = max(1, int(float(bucket_mb) * 1024 * 1024))
        trainable = [p for p in reversed(all_params) if p.requires_grad]
        buckets: List[List[torch.Tensor]] = []
        current: List[torch.Tensor] = []
        current_bytes = 0
        for p in trainable:
            nbytes = p.numel() * p.element_size()
            if current and (current_bytes + nbytes > limit or p.dtype != current[0].dtype):
                buckets.append(current)
                current, current_bytes = [], 0
            current.append(p)
            current_bytes += nbytes
        if current:
            buckets.append(current)
        self._ddl_buckets = [_Bucket(i, ps, [names[p] for p in ps], stop_slot=i == len(buckets) - 1)
                             for i, ps in enumerate(buckets)]
        self._ddl_bucket_of = {p: b for b in self._ddl_buckets for p in b.params}
        self._ddl_bytes = sum(p.numel() * p.element_size() for p in trainable) if self._ddl_size > 1 else 0
        self._ddl_counts = {p: 0 for p in trainable}
        self._ddl_next = 0  # index of the next bucket to launch
        self._ddl_synced = False
        self._ddl_hooks = []
        self._ddl_views: Dict[torch.Tensor, torch.Tensor] = {}
        if gradient_as_bucket_view and self._ddl_size > 1 and _one_host_shared_memory():
            self._ddl_shared_gradients()
        if self._ddl_size > 1:
            for bucket in self._ddl_buckets:
                if bucket.params[0] not in self._ddl_views and _flattens(bucket):  # not shared_zeros views
                    bucket.flatten(self._ddl_op)
        if self._ddl_size > 1:
            for p in trainable:
                self._ddl_hooks.append(p.register_post_accumulate_grad_hook(self._ddl_make_hook()))

    def _ddl_shared_gradients(self) -> None:
        """gradient_as_bucket_view: one shared-memory tensor per CPU float32/float64 gradient and
        per bucket's presence flags (ddl_runtime.shared_zeros, collective: the buckets are the
        same on every rank).  A fresh gradient is copied into that tensor, which becomes
        p.grad, when its bucket is reduced; the reduction then reads and writes it where it lies."""
        shareable = (torch.float32, torch.float64)
        for bucket in self._ddl_buckets:
            if bucket.dtype not in shareable or bucket.params[0].device.type != "cpu":
                continue
            np_dtype = np.float32 if bucket.dtype == torch.float32 else np.float64
            for p in bucket.params:
                self._ddl_views[p] = torch.from_numpy(_ddl.shared_zeros(tuple(p.shape), np_dtype))
            bucket.flags = torch.from_numpy(_ddl.shared_zeros(len(bucket.params) + bucket.stop_slot, np_dtype))

    def _ddl_check_consistent(self, names: Dict[torch.Tensor, str]) -> None:
        """Collective check that every rank optimizes the same parameters (a subclass that
        reduces over a subset of the ranks narrows it)."""
        _check_optimizer_consistent(self, names)

    # -- hooks --------------------------------------------------------------------------------

    def _ddl_make_hook(self) -> Callable[[torch.Tensor], None]:
        def hook(p: torch.Tensor) -> None:
            count = self._ddl_counts[p] + 1
            self._ddl_counts[p] = count
            if count > self._ddl_passes:
                raise DDLError(
                    f"DistributedOptimizer: gradient of {self._ddl_names[p]!r} was computed "
                    f"{count} times before step(); backward_passes_per_step={self._ddl_passes}"
                )
            if count == self._ddl_passes:
                bucket = self._ddl_bucket_of[p]
                bucket.ready += 1
                self._ddl_launch_ready()
            if self._ddl_next:
                # Drive the reductions already started while backward computes the rest (the
                # runtime progresses its requests whenever it is called).
                handle = self._ddl_buckets[self._ddl_next - 1].handle
                done = getattr(handle, "done", None)
                if done is not None:
                    done()
        return hook

    def _ddl_launch_ready(self) -> None:
        while self._ddl_next < len(self._ddl_buckets):
            bucket = self._ddl_buckets[self._ddl_next]
            if bucket.ready < len(bucket.params):
                return
            self._ddl_launch(bucket)

    def _ddl_launch(self, bucket: _Bucket) -> None:
        if bucket.flat is not None:
            self._ddl_launch_flat(bucket)
            return
        tensors: List[torch.Tensor] = []
        present: List[bool] = []
        views = self._ddl_views
        for p in bucket.params:
            view = views.get(p) if views else None
            if p.grad is None:
                present.append(False)
                if view is not None:  # the zeros this rank contributes; the gradient stays None
                    view.zero_()
                    tensors.append(view)
                else:
                    tensors.append(torch.zeros_like(p, memory_format=torch.contiguous_format))
            else:
                if p.grad.is_sparse:
                    raise _InputError(
                        f"DistributedOptimizer: sparse gradient for {self._ddl_names[p]!r} is not supported"
                    )
                if view is not None and p.grad.data_ptr() != view.data_ptr():
                    view.copy_(p.grad)  # once, or every step after zero_grad(set_to_none=True)
                    p.grad = view
                elif not p.grad.is_contiguous():
                    p.grad = p.grad.contiguous()
                present.append(True)
                tensors.append(p.grad)
        flags = bucket.flags
        if all(present):
            flags.fill_(1.0)
        else:
            flags.copy_(torch.tensor([1.0 if x else 0.0 for x in present] + [1.0] * bucket.stop_slot,
                                     dtype=flags.dtype))
        if bucket.stop_slot and _stop.slot_value() != _stop.GO:
            flags[-1] = _stop.slot_value()
        bucket.present = present
        tensors.append(flags)
        bucket.handle = _ddl.allreduce_n_async(tensors, op=self._ddl_op, names=bucket.names)
        bucket.launched = True
        self._ddl_next = bucket.index + 1

    def _ddl_launch_flat(self, bucket: _Bucket) -> None:
        """_ddl_launch for a flattened bucket: the gradients copied into the array its
        FlatAllreduce hands out (zeros where one is None), the flags set, the reduction started."""
        grads = [p.grad for p in bucket.params]
        present = [g is not None for g in grads]
        parts, flags = bucket.views_of(bucket.flat.buffer())
        if all(present):
            for g, p in zip(grads, bucket.params):
                if g.is_sparse:
                    raise _InputError(f"DistributedOptimizer: sparse gradient for {self._ddl_names[p]!r} is not supported")
            torch._foreach_copy_(parts, grads)
            flags.fill_(1.0)
        else:
            for part, g, p in zip(parts, grads, bucket.params):
                if g is None:
                    part.zero_()
                elif g.is_sparse:
                    raise _InputError(f"DistributedOptimizer: sparse gradient for {self._ddl_names[p]!r} is not supported")
                else:
                    part.copy_(g)
            flags.copy_(torch.tensor([1.0 if x else 0.0 for x in present] + [1.0] * bucket.stop_slot,
                                     dtype=bucket.dtype))
        if bucket.stop_slot and _stop.slot_value() != _stop.GO:
            flags[-1] = _stop.slot_value()
        bucket.present = present
        bucket.handle = bucket.flat.start()
        bucket.launched = True
        self._ddl_next = bucket.index + 1

    # -- public --------------------------------------------------------------------------------

    def synchronize(self) -> None:
        """Wait for every gradient reduction of this step (launching any not started yet)."""
        if self._ddl_size == 1 or self._ddl_synced:
            self._ddl_synced = True
            return
        self._ddl_wait_reductions()   # the collectives count their time in the record (core/stats.py)

    def _ddl_wait_reductions(self) -> None:
        # Buckets whose gradients never all arrived (unused parameters, or a rank where a
        # gradient is None) are launched now, in index order, zero-filled where a gradient is
        # missing; their presence flags tell every rank the same story after the reduction.
        while self._ddl_next < len(self._ddl_buckets):
            self._ddl_launch(self._ddl_buckets[self._ddl_next])
        problems: List[str] = []
        for bucket in self._ddl_buckets:
            out = bucket.handle.wait()
            n = len(bucket.params)
            if bucket.flat is not None:  # one flat array: the gradients, then the flags
                parts, flags = bucket.views_of(out)
                results: List[Any] = parts + [flags]
            else:
                results = list(out) if out is not None else []
            flags = results[n] if len(results) > n else bucket.flags
            fractions = _as_tensor_result(flags, bucket.flags).tolist()  # Python floats: exact for every dtype
            if self._ddl_op == "sum":
                fractions = [f / self._ddl_size for f in fractions]
            if bucket.stop_slot:
                _stop.post_folded(fractions[n], self._ddl_size)
            into: List[torch.Tensor] = []
            values: List[torch.Tensor] = []
            for j, p in enumerate(bucket.params):
                frac = fractions[j]
                if frac < 0.5 / self._ddl_size:  # absent on every rank: leave it None
                    if bucket.present[j]:  # pragma: no cover - impossible by construction
                        problems.append(self._ddl_names[p])
                    continue
                if frac < 1.0 - 0.5 / self._ddl_size:
                    problems.append(
                        f"{self._ddl_names[p]!r} (None on {round((1.0 - frac) * self._ddl_size)} "
                        f"of {self._ddl_size} ranks, {'including' if not bucket.present[j] else 'not'} this one)"
                    )
                    continue
                if j < len(results) and results[j] is not None and results[j] is not p.grad:
                    into.append(p.grad)
                    values.append(_as_tensor_result(results[j], p.grad))
            if into:
                torch._foreach_copy_(into, values)
            bucket.handle = None
        self._ddl_synced = True
        if problems:
            self._ddl_reset()
            raise _MismatchError(
                "DistributedOptimizer: gradient is None on some ranks only for parameter "
                + problems[0]
                + (f" and {len(problems) - 1} more" if len(problems) > 1 else "")
                + "; every rank must compute a gradient for the same parameters (check for "
                "parameters unused on some ranks)"
            )

    def _ddl_reset(self) -> None:
        for p in self._ddl_counts:
            self._ddl_counts[p] = 0
        for bucket in self._ddl_buckets:
            bucket.ready = 0
            bucket.launched = False
            bucket.handle = None
            bucket.present = []
        self._ddl_next = 0

    def step(self, closure=None):
        """Average the gradients across ranks (waiting for the reductions), then step."""
        if closure is not None and self._ddl_size > 1:
            raise _InputError(
                "DistributedOptimizer.step(closure): closures re-run backward and are not supported "
                "with gradient averaging; call backward() yourself, then step()"
            )
        if self._ddl_size > 1:
            self.synchronize()
        out = super().step(closure) if closure is not None else super().step()  # type: ignore[misc]
        self._ddl_synced = False
        if self._ddl_size > 1:
            self._ddl_reset()
        self._ddl_stats.end_step(self._ddl_bytes)
        return out

    def zero_grad(self, set_to_none: bool = True) -> None:
        if self._ddl_size > 1 and any(b.launched for b in self._ddl_buckets) and not self._ddl_synced:
            raise DDLError(
                "DistributedOptimizer.zero_grad() while gradient reductions are in flight: "
                "call step() (or synchronize()) first"
            )
        if self._ddl_size > 1 and not self._ddl_synced:
            self._ddl_reset()
        super().zero_grad(set_to_none=set_to_none)  # type: ignore[misc]

    def remove_hooks(self) -> None:
        """Detach the gradient hooks (the optimizer then behaves like the one it wraps)."""
        for h in self._ddl_hooks:
            h.remove()
        self._ddl_hooks = []
        self._ddl_size = 1


def DistributedOptimizer(optimizer: torch.optim.Optimizer, named_parameters=None, op: str = "avg",
                         backward_passes_per_step: int = 1,
                         bucket_mb: Optional[float] = None,
                         gradient_as_bucket_view: bool = False) -> torch.optim.Optimizer:
    """Wrap ``optimizer`` so that ``step()`` uses gradients averaged over all ranks.

    Returns an instance of a subclass of the optimizer's own class that shares its parameter
    groups and state (LR schedulers and ``isinstance`` checks keep working); use the returned
    object from then on.

    - ``named_parameters``: ``model.named_parameters()``, used to name parameters in errors.
    - ``op``: ``"avg"`` (default) or ``"sum"``.
    - ``backward_passes_per_step``: gradients are accumulated locally over this many
      ``backward()`` calls and reduced once, before ``step()``.
    - ``bucket_mb``: gradient bucket size for the fused reductions (default ``DDL_FUSION_MB``
      or 4 MB); each bucket starts reducing as soon as all its gradients are ready.
    - ``gradient_as_bucket_view``: as torch DDP's option of that name, for a job whose ranks
      share one host: CPU float32/float64 gradients become tensors in shared memory
      (``ddl_runtime.shared_zeros``) that the reduction reads and writes where they lie, with
      no copy into an arena (ResNet-50's gradients: about 2x faster, BENCHMARKS.md).  Keep the
      usual ``zero_grad()``: autograd writes fresh gradients, which are copied in once per step
      (a whole step with ResNet-50's 25.6 M gradients: 1.06-1.10x faster on 2 ranks here);
      ``zero_grad(set_to_none=False)`` keeps them in place, but then autograd adds each new
      gradient into the old one, which cost as much as it saved.  Elsewhere it changes nothing.
    """
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise _InputError(
            f"DistributedOptimizer: optimizer is a {type(optimizer).__name__}, not a torch.optim.Optimizer"
        )
    if isinstance(optimizer, _DistributedOptimizerMixin):
        raise _InputError("DistributedOptimizer: this optimizer is already distributed")
    base = optimizer.__class__
    cls = type(f"Distributed{base.__name__}", (_DistributedOptimizerMixin, base), {})
    cls.__module__ = __name__
    obj = cls.__new__(cls)
    state = dict(optimizer.__dict__)
    state.pop("step", None)  # an LR scheduler's per-instance wrapper bound to the old object
    obj.__dict__.update(state)
    if not isinstance(gradient_as_bucket_view, bool):
        raise _InputError(f"DistributedOptimizer: gradient_as_bucket_view={gradient_as_bucket_view!r}; "
                          "expected True or False")
    obj._ddl_setup(named_parameters, op, backward_passes_per_step, bucket_mb, gradient_as_bucket_view)
    return obj
