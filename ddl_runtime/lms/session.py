"""The LMS mechanism for one model: autograd's saved-tensor hooks and per-block recompute.

A ``Session`` wraps the model's ``forward`` (an instance attribute: ``state_dict`` and the
class are untouched) so that every forward that builds a graph runs inside
``torch.autograd.graph.saved_tensors_hooks``, and wraps each block's ``forward`` (the blocks:
the children of ``nn.Sequential`` / ``nn.ModuleList`` containers, else the model's children) to
time it and, where the plan says so, run it under ``torch.utils.checkpoint`` (non-reentrant,
RNG state preserved so dropout masks repeat; BatchNorm running statistics are restored after
the recompute so they are updated once).

Step 1 is the profile step: every saved tensor's bytes and block, every block's forward time and
the bandwidth (measured once per process) are recorded, while tensors are kept as long as the
device holds less than the budget and swapped beyond it (WML CE's rule).  Memory is a storage's:
the views autograd saves of one storage are recorded as that storage (its bytes once), and a
storage is kept or swapped whole, with every view of it (a swapped storage goes to the host in one
copy and comes back in one; each view is rebuilt on it with its own offset, shape and strides).  At the start of step
2 the planner (``planner.make_plan``) decides per tensor; a step whose saved bytes differ from
the profile's by more than a tenth (a new batch size) profiles again.
"""
from __future__ import annotations

import collections
import dataclasses
import contextlib
import functools
import sys
import time
import weakref
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

import torch
from torch import nn

from ..errors import DDLInputError
from . import planner
from .transfer import CudaTransfer, HostStandIn, Transfer

RESHAPE_TOLERANCE = 0.1
PROFILE_STEPS = 2          # steps profiled before the plan (block times: the least of them)
WAIT_TOLERANCE = 0.05      # waits on copies past the plan's prediction, as a share of a step, that plan again
MAX_CORRECTIONS = 2        # plans made again from the waits seen, at most
MIN_PREFETCH_BYTES = 64 << 20      # the prefetch window's most, by default (_prefetch_window)
_warned = set()


def warn_once(key: str, message: str) -> None:
    if key not in _warned:
        _warned.add(key)
        from ..core.log import log
        log(message)


class LmsError(DDLInputError):
    """A bad LMS setting (one line)."""


@dataclass
class Stats:
    """What LMS did in the last step (bytes) and in all (steps, waits)."""
    steps: int = 0
    budget_bytes: int = 0
    kept_bytes: int = 0
    swapped_bytes: int = 0
    recomputed_bytes: int = 0
    peak_bytes: int = 0
    wait_s: float = 0.0
    late_copies: int = 0
    plan: str = "profiling"

    def __str__(self) -> str:
        mb = 1 << 20
        if self.plan.startswith("LMS is "):     # off, or on for no model: no figures to give
            return self.plan
        return (f"LMS: {self.steps} steps; last step kept {self.kept_bytes / mb:.1f} MB, swapped "
                f"{self.swapped_bytes / mb:.1f} MB, recomputed {self.recomputed_bytes / mb:.1f} MB; peak "
                f"{self.peak_bytes / mb:.1f} MB of a {self.budget_bytes / mb:.1f} MB budget; "
                f"{self.wait_s * 1e3:.1f} ms waiting on {self.late_copies} late copies; plan: {self.plan}")

    def merged(self, other: "Stats") -> "Stats":
        return Stats(self.steps + other.steps, self.budget_bytes + other.budget_bytes,
                     self.kept_bytes + other.kept_bytes, self.swapped_bytes + other.swapped_bytes,
                     self.recomputed_bytes + other.recomputed_bytes, max(self.peak_bytes, other.peak_bytes),
                     self.wait_s + other.wait_s, self.late_copies + other.late_copies,
                     f"{self.plan}; {other.plan}")


class _Handle:
    """A swapped storage: its host copy, and its device copy while one is back (bytes: uint8)."""
    __slots__ = ("host", "out_event", "dev", "in_event", "nbytes", "uses", "block", "graph", "__weakref__")

    def __init__(self, host, out_event, nbytes, block, graph):
        self.host, self.out_event, self.nbytes, self.block, self.graph = host, out_event, nbytes, block, graph
        self.dev = self.in_event = None
        self.uses = 0


class _View:
    """A saved view of a swapped storage: rebuilt on the storage's device copy when unpacked."""
    __slots__ = ("handle", "dtype", "offset", "size", "stride")

    def __init__(self, handle: _Handle, t: torch.Tensor) -> None:
        self.handle, self.dtype = handle, t.dtype
        self.offset, self.size, self.stride = t.storage_offset(), tuple(t.shape), tuple(t.stride())

    def on(self, dev: torch.Tensor) -> torch.Tensor:
        return torch.empty(0, dtype=self.dtype, device=dev.device).set_(dev.untyped_storage(), self.offset,
                                                                         self.size, self.stride)


class _Stored:
    """A storage saved in this step: its first view's index (None: first saved as a recomputed
    block's input), and how it is held: swapped (its handle) or kept (the stand-in's count)."""
    __slots__ = ("storage", "root", "handle", "keeper")

    def __init__(self, storage, root: Optional[int]) -> None:
        self.storage = weakref.ref(storage)      # dead once the storage is freed (its address may be reused)
        self.root = root
        self.handle: Optional[_Handle] = None
        self.keeper = None


class _Graph:
    """The swapped tensors of one forward, in the order they were saved, and the prefetch cursor."""

    def __init__(self) -> None:
        # weak: a handle holds its graph, and autograd holds the handle while backward needs it; a
        # strong list made a cycle that kept every step's host copies (pinned memory) alive until
        # Python's cycle collector ran (a ResNet-152 step swaps about 30 GB: the host ran out)
        self.swapped: List["weakref.ReferenceType[_Handle]"] = []
        self.cursor = -1            # next handle (from the end) to bring back
        self.ahead = 0              # bytes brought back and not yet used
        self.in_backward = False

    def handles(self) -> List[_Handle]:
        return [h for h in (ref() for ref in self.swapped) if h is not None]


class _FreezeNorm:
    """Restores the running statistics of the batch norms of a recompute unit's blocks after its recompute."""

    def __init__(self, blocks: List[nn.Module]) -> None:
        self.norms = [m for block in blocks for m in block.modules()
                      if isinstance(m, nn.modules.batchnorm._NormBase) and m.track_running_stats and m.training]
        self.saved: List[Dict[str, torch.Tensor]] = []

    def __enter__(self):
        self.saved = [{k: b.clone() for k, b in m.named_buffers(recurse=False) if b is not None}
                      for m in self.norms]
        return self

    def __exit__(self, *exc):
        with torch.no_grad():
            for m, saved in zip(self.norms, self.saved):
                for k, value in saved.items():
                    getattr(m, k).copy_(value)
        return False


def find_blocks(model: nn.Module) -> List[Tuple[str, nn.Module]]:
    """The recompute units: a container (``nn.Sequential``, ``nn.ModuleList``) whose children hold
    modules of their own is opened, as is the model; every other module found is a block.  So a
    ResNet's blocks are its stem layers, each Bottleneck and its head."""
    containers = (nn.Sequential, nn.ModuleList)

    def opened(module: nn.Module) -> bool:
        return any(next(c.children(), None) is not None for c in module.children())

    out: List[Tuple[str, nn.Module]] = []

    def walk(prefix: str, module: nn.Module) -> None:
        for name, child in module.named_children():
            path = f"{prefix}.{name}" if prefix else name
            if isinstance(child, containers) and opened(child):
                walk(path, child)
            else:
                out.append((f"{path} ({type(child).__name__})", child))
    walk("", model)
    return out or [(type(model).__name__, model)]


def _hooked(modules) -> bool:
    """Whether forward hooks would see these modules' calls (their own, or global ones)."""
    if nn.modules.module._global_forward_hooks or nn.modules.module._global_forward_pre_hooks:
        return True
    return any(m._forward_hooks or m._forward_pre_hooks for m in modules)


def chained_blocks(model: nn.Module, blocks: List[Tuple[str, nn.Module]]) -> List[bool]:
    """Per block: whether it is the next child of the same plain ``nn.Sequential`` as the block
    before it (so the container feeds it that block's output and nothing else sees it), neither
    with forward hooks: such blocks may be recomputed as one segment (planner.BlockProfile.chains)."""
    parent = {}
    for container in model.modules():
        if type(container).forward is nn.Sequential.forward and isinstance(container, nn.Sequential):
            for i, child in enumerate(container.children()):
                parent[id(child)] = (id(container), i)
    flags = [False]
    for (_, prev), (_, block) in zip(blocks, blocks[1:]):
        a, b = parent.get(id(prev)), parent.get(id(block))
        flags.append(a is not None and b is not None and a[0] == b[0] and b[1] == a[1] + 1
                     and not _hooked((prev, block)))
    return flags


def _timeline():
    runtime = sys.modules.get("ddl_runtime.state.runtime")
    rt = runtime.get() if runtime is not None else None
    return rt.timeline if rt is not None and rt.timeline.enabled else None


def resolve_budget(budget, capacity: int) -> int:
    if isinstance(budget, bool) or not isinstance(budget, (int, float)):
        raise LmsError(f"LMS budget {budget!r}: expected bytes (an int > 0) or a fraction of the device (0 < f <= 1)")
    if isinstance(budget, float):
        if not 0 < budget <= 1:
            raise LmsError(f"LMS budget {budget!r}: a fraction must be in (0, 1]; give bytes as an int")
        return int(capacity * budget)
    if budget < 0:
        raise LmsError(f"LMS budget {budget}: expected bytes > 0 (0: all the memory this process may use)")
    return budget or capacity


class Session:
    def __init__(self, model: nn.Module, budget=0, size: int = 1 << 20, transfer: Optional[Transfer] = None,
                 optimizer: Optional[torch.optim.Optimizer] = None, prefetch_bytes: Optional[int] = None,
                 segments: bool = True) -> None:
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise LmsError(f"LMS size {size!r}: expected the bytes under which a tensor is never swapped (an int >= 0)")
        if not isinstance(model, nn.Module):
            raise LmsError(f"lms.enable: {model!r} is not a torch model (an nn.Module)")
        resolve_budget(budget, 1)       # a bad budget is refused here too, not only where a GPU is
        self.model = model
        self.size = size
        self.segments = bool(segments)     # chained blocks may be recomputed as one segment
        self.optimizer = optimizer
        self.transfer = transfer if transfer is not None else _default_transfer(model)
        self.active = self.transfer is not None
        self.budget = resolve_budget(budget, self.transfer.capacity()) if self.active else 0
        self.prefetch_bytes = prefetch_bytes
        self.blocks = find_blocks(model)
        self._chains: List[bool] = [False] * len(self.blocks)   # read again at each plan (hooks added late count)
        self._originals: Dict[int, Any] = {}
        self._rec_simple: List[bool] = [True] * len(self.blocks)
        self._skip: Optional[Tuple[int, int, torch.Tensor]] = None   # a segment's later blocks: (next, last, output)
        self._replan = False
        self.stats_ = Stats(budget_bytes=self.budget)
        if not self.active:
            self.stats_.plan = "LMS is off for this model: it is not on a GPU, so there is nothing to move"
        self._plan: Optional[planner.Plan] = None
        self._profile: Optional[planner.Profile] = None
        self._rec_tensors: List[planner.SavedTensor] = []
        self._rec_times: List[float] = [0.0] * len(self.blocks)
        self._rec_inputs: List[int] = [0] * len(self.blocks)
        self._rec_input_roots: List[Optional[int]] = [None] * len(self.blocks)
        self._rec_calls: List[int] = [0] * len(self.blocks)
        self._span_end: List[int] = [0] * len(self.blocks)
        self._expected_bytes = 0
        self._profiling = True
        self._profile_left = PROFILE_STEPS
        self._best_times: Optional[List[float]] = None
        self._corrections = 0
        self._planned_steps = 0
        self._wait_mark = 0.0
        self._block: Optional[int] = None
        self._inputs_of: Optional[int] = None
        self._index = 0
        self._graph: Optional[_Graph] = None
        self._stored: Dict[int, _Stored] = {}    # this step's saved storages by address
        self._param_ptrs: set = set()
        self._limit = self.budget
        self._biggest = 0                  # the largest tensor the profile step has seen saved
        self._outbound: collections.deque = collections.deque()   # (event, bytes) of copies out in flight
        self._step_bytes = 0
        self._installed: List[Tuple[nn.Module, Any]] = []
        if self.active:
            self._install()

    # -- installation ------------------------------------------------------------------
    def _install(self) -> None:
        for b, (name, block) in enumerate(self.blocks):
            if block is self.model:
                continue
            self._originals[b] = block.forward
            self._patch(block, functools.partial(self._block_forward, b, block.forward))
        self._patch(self.model, functools.partial(self._root_forward, self.model.forward))

    def _patch(self, module: nn.Module, forward) -> None:
        had = "forward" in module.__dict__
        self._installed.append((module, module.__dict__.get("forward") if had else None))
        module.forward = forward

    def remove(self) -> None:
        """Undo ``enable``: the model's forwards are its own again."""
        for module, previous in reversed(self._installed):
            if previous is None:
                module.__dict__.pop("forward", None)
            else:
                module.forward = previous
        self._installed = []
        self.active = False

    # -- forwards ----------------------------------------------------------------------
    def _root_forward(self, forward, *args, **kwargs):
        if not self.active or not torch.is_grad_enabled() or _compiling():
            if _compiling():
                _compiled_note()
            return forward(*args, **kwargs)
        self._begin_step()
        graph = self._graph
        try:
            with torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack):
                out = forward(*args, **kwargs)
        except torch.OutOfMemoryError as e:
            raise self._oom(e, self._block_name(self._block)) from None
        finally:
            self._block = None
        self._end_forward(graph)
        return out

    def _block_forward(self, b: int, forward, *args, **kwargs):
        if not self.active or self._graph is None or not torch.is_grad_enabled() or _compiling():
            return forward(*args, **kwargs)
        outer, self._block = self._block, b
        try:
            if self._profiling:
                self._rec_calls[b] += 1
                self._rec_inputs[b] += sum(a.nbytes for a in args if isinstance(a, torch.Tensor))
                elapsed = self.transfer.timer()
                out = forward(*args, **kwargs)
                self._rec_times[b] += elapsed()
                self._rec_input_roots[b] = self._input_root(args, kwargs)
                self._rec_simple[b] = self._rec_simple[b] and len(args) == 1 and not kwargs \
                    and isinstance(args[0], torch.Tensor) and isinstance(out, torch.Tensor)
                return out
            if self._skip is not None and self._skip[0] == b:
                return self._skipped(b, args, kwargs)
            if b in self._plan.recompute:
                first, last = self._plan.unit_of(b)
                if (first, last) != (b, b) and (first != b or _hooked(self.blocks[k][1] for k in range(b, last + 1))):
                    first = last = b    # a hook added since the plan: this block alone, and plan again next step
                    self._replan = True
                ctx = functools.partial(self._recompute_contexts, first, last)
                run = forward if last == first else functools.partial(self._run_segment, forward, first, last)
                self._inputs_of = b     # our hooks see only the inputs the checkpoint keeps
                try:
                    out = torch.utils.checkpoint.checkpoint(run, *args, use_reentrant=False,
                                                            context_fn=ctx, **kwargs)
                finally:
                    self._inputs_of = None
                # its tensors (its segment's) were the checkpoint's, not ours
                self._index = max(self._span_end[k] for k in range(first, last + 1))
                if last > first:
                    self._skip = (first + 1, last, out)
                return out
            return forward(*args, **kwargs)
        finally:
            self._block = outer

    def _run_segment(self, forward, first: int, last: int, x):
        """Blocks first..last of a segment, each fed the one before's output (their own forwards:
        chained blocks have no hooks)."""
        x = forward(x)
        for k in range(first + 1, last + 1):
            x = self._originals[k](x)
        return x

    def _skipped(self, b: int, args, kwargs):
        """A later block of a recomputed segment: the segment's first block already ran it; the
        container hands it the segment's output, which it passes on."""
        _, last, out = self._skip
        if len(args) != 1 or kwargs or args[0] is not out:
            self._skip = None
            raise LmsError(f"LMS: {self._block_name(b)} was recomputed as part of a segment, but its container did "
                           "not feed it the block before's output; call ddl_runtime.lms.enable(..., segments=False)")
        self._skip = None if b == last else (b + 1, last, out)
        return out

    def _recompute_contexts(self, first: int, last: int):
        return contextlib.nullcontext(), _Recompute(self, first, last)

    # -- steps -------------------------------------------------------------------------
    def _begin_step(self) -> None:
        if self._replan:
            self._replan = False
            self._start_profile()
        if self._graph is not None and self._profiling and self.stats_.steps:
            self._profile_end_of_step()
        elif self._profile is not None and not self._profiling:
            known = self._expected_bytes
            if known and abs(self._step_bytes - known) > RESHAPE_TOLERANCE * known:
                self._start_profile()          # the saved bytes changed (a new batch size): profile again
        self.stats_.steps += 1
        self._collect_waits()
        if self._plan is not None and not self._profiling:
            self._check_waits()
        self._graph = _Graph()
        self._skip = None
        self._stored = {}
        self._index = 0
        self._step_bytes = 0
        self._param_ptrs = {p.untyped_storage().data_ptr() for p in self.model.parameters()}
        fixed = self._fixed_bytes()
        if fixed >= self.budget:
            raise LmsError(f"LMS budget {self.budget} bytes is below the {fixed} bytes the model's weights, "
                           f"gradients and optimizer state already need: raise the budget (or give 0: all the "
                           f"memory this process may use)")
        # the profile step keeps tensors while the device holds less than this (``_swap``): the
        # gradients backward will allocate are not there yet, so they are left room for
        missing = 0 if isinstance(self.transfer, HostStandIn) else sum(
            p.nbytes for p in self.model.parameters() if p.requires_grad and p.grad is None)
        self._limit = self.budget - self._reserve() - missing

    def _start_profile(self) -> None:
        self._profiling = True
        self._profile_left = PROFILE_STEPS
        self._best_times = None
        self._biggest = 0
        self._new_profile_step()

    def _new_profile_step(self) -> None:
        self._plan = None
        self._rec_tensors = []
        self._rec_times = [0.0] * len(self.blocks)
        self._rec_inputs = [0] * len(self.blocks)
        self._rec_input_roots = [None] * len(self.blocks)
        self._rec_calls = [0] * len(self.blocks)
        self._rec_simple = [True] * len(self.blocks)

    def _check_waits(self) -> None:
        """After a planned step: when the copies made the steps wait far past the plan's prediction,
        the link is slower than measured (or the compute faster): plan again with the bandwidth the
        waits show (at most MAX_CORRECTIONS times).  The swapped bytes a step take
        ``swapped / bandwidth + wait`` to move, so that is the bandwidth they had."""
        self._planned_steps += 1
        n = self._planned_steps - 1                   # the first planned step settles (its copies, allocations)
        plan, prof = self._plan, self._profile
        if n < 2 or not plan.swapped_bytes or self._corrections >= MAX_CORRECTIONS:
            if n < 2:
                self._wait_mark = self.stats_.wait_s
            return
        wait = (self.stats_.wait_s - self._wait_mark) / n
        step = 3 * prof.forward_s                     # forward + backward, about
        if wait <= plan.extra_s + WAIT_TOLERANCE * step:
            return
        bw = max(prof.bandwidth_Bps, 1.0)
        seen = plan.swapped_bytes / (plan.swapped_bytes / bw + wait)
        self._corrections += 1
        self._profile = dataclasses.replace(prof, bandwidth_Bps=seen)
        before = plan.describe()
        self._make_plan()
        from ..core.log import log
        log(f"LMS: copies waited {wait * 1e3:.1f} ms a step, past the plan's +{plan.extra_s * 1e3:.1f} ms: "
            f"planned again for {seen / 1e9:.2f} GB/s (measured {bw / 1e9:.2f} GB/s); was: {before}; now: "
            f"{self.stats_.plan}")

    def _profile_end_of_step(self) -> None:
        """A profiled step ended: profile another, or plan.  Each block's time is its least over the
        profiled steps: the first step's are cold (cuDNN's autotuning, lazy initialisation, the first
        pinned allocations), and on an H200 made ResNet-152's forward look long enough to hide 31 GB
        of copies a step (planned +0 ms; measured 0.15x of uncapped)."""
        times = self._rec_times
        best = self._best_times
        self._best_times = list(times) if best is None else [min(a, b) for a, b in zip(best, times)]
        self._profile_left -= 1
        if self._profile_left > 0:
            self._new_profile_step()
            return
        self._rec_times = self._best_times
        self._finish_profile()

    def _finish_profile(self) -> None:
        self._chains = chained_blocks(self.model, self.blocks)
        self._profile = planner.Profile(
            tuple(self._rec_tensors),
            tuple(planner.BlockProfile(name, t, i, block is not self.model and calls == 1, self._chains_at(b), root)
                  for b, ((name, block), t, i, calls, root) in enumerate(zip(self.blocks, self._rec_times,
                                                                             self._rec_inputs, self._rec_calls,
                                                                             self._rec_input_roots))),
            self.transfer.bandwidth())
        self._profiling = False
        self._corrections = 0
        self._make_plan()

    def _make_plan(self) -> None:
        fixed = self._fixed_bytes()
        self._plan = planner.make_plan(self._profile, max(0, self.budget - fixed - self._reserve()), self.size)
        self.stats_.plan = self._plan.describe()
        self._planned_steps = 0
        self._wait_mark = self.stats_.wait_s
        for i, t in enumerate(self._profile.tensors):
            if t.block is not None:
                self._span_end[t.block] = i + 1
        prof, decision = self._profile, self._plan.tensors     # the storages some view of which is saved
        self._expected_bytes = sum(prof.storage_bytes(r) for r, members in prof.storages.items()
                                   if any(decision[i] != planner.RECOMPUTE for i in members))
        tl = _timeline()
        if tl is not None:
            now = time.perf_counter()
            tl.span("LMS_PLAN", 1, now, now, {"plan": self.stats_.plan})

    def _chains_at(self, b: int) -> bool:
        """Block b may join block b-1's segment: chained in a plain Sequential, each called once per
        step with one tensor, returning one (segments=False: never)."""
        return (self.segments and b > 0 and self._chains[b] and self._rec_calls[b] == 1 == self._rec_calls[b - 1]
                and self._rec_simple[b] and self._rec_simple[b - 1])

    def _fixed_bytes(self) -> int:
        """Weights, their gradients (counted even while unset) and optimizer state."""
        if isinstance(self.transfer, HostStandIn):
            params = [p for p in self.model.parameters()]
            n = sum(p.nbytes for p in params) + sum(p.nbytes for p in params if p.requires_grad)
            if self.optimizer is not None:
                n += sum(v.nbytes for s in self.optimizer.state.values() for v in s.values()
                         if isinstance(v, torch.Tensor))
            self.transfer.base = n
            return n
        missing = sum(p.nbytes for p in self.model.parameters() if p.requires_grad and p.grad is None)
        return self.transfer.allocated() + missing

    def _reserve(self) -> int:
        """Room for backward's own tensors (twice the largest saved tensor) and the copies brought
        back ahead (a recompute's tensors are in the planner's peak)."""
        if self._profile is None or self._profiling:
            return self._prefetch_window() + self.budget // 20
        biggest = max((t.nbytes for t in self._profile.tensors), default=0)
        return 2 * biggest + self._prefetch_window()

    def _prefetch_window(self) -> int:
        """Bytes brought back ahead of their use in backward: a sixteenth of the budget, at most
        MIN_PREFETCH_BYTES (a fixed 64 MB left a budget under about 70 MB no room for activations),
        and at least two of the largest saved tensors."""
        if self.prefetch_bytes is not None:
            return self.prefetch_bytes
        window = min(MIN_PREFETCH_BYTES, self.budget // 16)
        if self._profile is None:
            return window
        biggest = max((t.nbytes for t in self._profile.tensors), default=0)
        return max(window, 2 * biggest)

    def _end_forward(self, graph: _Graph) -> None:
        plan = self._plan
        if plan is not None and not self._profiling:
            self.stats_.kept_bytes, self.stats_.swapped_bytes = plan.kept_bytes, plan.swapped_bytes
            self.stats_.recomputed_bytes = plan.recomputed_bytes
        else:
            self.stats_.swapped_bytes = sum(h.nbytes for h in graph.handles())
            self.stats_.kept_bytes = self._step_bytes - self.stats_.swapped_bytes
            self.stats_.recomputed_bytes = 0
        self._top_up(graph)

    # -- the hooks ---------------------------------------------------------------------
    def _pack(self, t: torch.Tensor):
        inputs_of = self._inputs_of        # a recomputed block's inputs, saved by its checkpoint
        if inputs_of is None:
            index = self._index
            self._index += 1
        try:
            storage = t.untyped_storage()
            ptr = storage.data_ptr()
        except (RuntimeError, NotImplementedError):   # sparse, nested, ...: keep
            ptr = None
        if ptr is None or ptr in self._param_ptrs or t.device.type == "meta":
            if inputs_of is None:
                self._record(index, 0)
            return t
        entry = self._stored.get(ptr)
        if entry is not None and entry.storage() is not storage:
            entry = None                    # that storage was freed and its address reused
        if entry is None:                   # a storage not saved before in this step
            nbytes = storage.nbytes()
            if inputs_of is None:
                self._record(index, nbytes)
                self._step_bytes += nbytes
                swap = self._swap(index, nbytes)
            else:
                swap = inputs_of in self._plan.swap_inputs and nbytes >= self.size and nbytes > 0
            entry = self._stored[ptr] = _Stored(storage, index if inputs_of is None else None)
            if swap:
                entry.handle = self._swap_out(storage, t.device, nbytes)
        elif inputs_of is None:             # another view of a saved storage: no new bytes, its storage's fate
            self._record(index, 0, entry.root)
        if entry.handle is not None:
            entry.handle.uses += 1
            return _View(entry.handle, t)
        if isinstance(self.transfer, HostStandIn):     # the stand-in counts the storage once, while any view is kept
            keeper = entry.keeper() if entry.keeper is not None else None
            if keeper is None:
                keeper = _KeptStorage(storage.nbytes(), self.transfer)
                entry.keeper = weakref.ref(keeper)
            return _Kept(t, keeper)
        return t

    def _swap_out(self, storage, device: torch.device, nbytes: int) -> _Handle:
        """Start copying a whole storage to the host (as bytes); its handle."""
        whole = torch.empty(0, dtype=torch.uint8, device=device).set_(storage, 0, (nbytes,), (1,))
        host, event = self.transfer.to_host(whole)
        if self._profiling:
            self._outbound.append((event, nbytes))
        handle = _Handle(host, event, nbytes, self._block, self._graph)
        self._graph.swapped.append(weakref.ref(handle))
        return handle

    def _input_root(self, args, kwargs) -> Optional[int]:
        """The saved storage (its first view's index) a block's one tensor input views, if saved."""
        tensors = [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
        if len(tensors) != 1:
            return None
        try:
            storage = tensors[0].untyped_storage()
            entry = self._stored.get(storage.data_ptr())
        except (RuntimeError, NotImplementedError):
            return None
        return entry.root if entry is not None and entry.storage() is storage else None

    def _outbound_bytes(self) -> int:
        """Bytes of swapped tensors still being copied out (oldest first; those done are let go)."""
        out = self._outbound
        while out and self.transfer.copied(out[0][0]):
            out.popleft()
        return sum(n for _, n in out)

    def _record(self, index: int, nbytes: int, storage: Optional[int] = None) -> None:
        if self._profiling:
            self._rec_tensors.append(planner.SavedTensor(self._block, nbytes, storage))

    def _swap(self, index: int, nbytes: int) -> bool:
        if nbytes < self.size or nbytes == 0:
            return False
        if self._profiling:
            # room for backward's own tensors grows with the largest tensor saved so far (twice it,
            # as _reserve gives later steps); swapped tensors whose copy has not finished still
            # hold their device memory
            self._biggest = max(self._biggest, nbytes)
            held = self.transfer.allocated() + self._outbound_bytes() + (
                nbytes if isinstance(self.transfer, HostStandIn) else 0)
            return held > self._limit - 2 * self._biggest
        plan = self._plan
        return index < len(plan.tensors) and plan.tensors[index] == planner.SWAP

    def _unpack(self, packed):
        if isinstance(packed, _Kept):
            return packed.t
        if not isinstance(packed, _View):
            return packed
        view, packed = packed, packed.handle
        graph = packed.graph
        if not graph.in_backward:
            try:                        # at the end of this backward, copies not used are let go
                torch.autograd.Variable._execution_engine.queue_callback(functools.partial(self._end_backward, graph))
                graph.in_backward = True
            except RuntimeError:        # unpacked outside a backward (grad_fn._saved_*): nothing to end
                pass
        if packed.dev is None:
            self._fetch(packed)
        self._top_up(graph)
        waited = self.transfer.use(packed.dev, packed.in_event)
        if waited:
            self.stats_.wait_s += waited
            self.stats_.late_copies += 1
            tl = _timeline()
            if tl is not None:
                now = time.perf_counter()
                tl.span("LMS_WAIT", 2, now - waited, now, {"bytes": packed.nbytes,
                                                           "block": self._block_name(packed.block)})
        t = view.on(packed.dev)
        packed.uses -= 1
        if packed.uses <= 0:
            self._release(packed)
        return t

    def _fetch(self, h: _Handle) -> None:
        try:
            h.dev, h.in_event = self.transfer.to_device(h.host, h.out_event)
        except torch.OutOfMemoryError as e:
            raise self._oom(e, self._block_name(h.block)) from None
        h.graph.ahead += h.nbytes
        if isinstance(self.transfer, HostStandIn):
            self.transfer.account(h.nbytes)

    def _release(self, h: _Handle) -> None:
        if h.dev is not None:
            h.graph.ahead -= h.nbytes
            if isinstance(self.transfer, HostStandIn):
                self.transfer.account(-h.nbytes)
        h.dev = h.in_event = None

    def _end_backward(self, graph: _Graph) -> None:
        for h in graph.handles():
            self._release(h)
        graph.cursor = -1                  # a second backward (retain_graph) brings them back again
        graph.in_backward = False

    def _top_up(self, graph: _Graph) -> None:
        """Bring swapped tensors back, last saved first, until the window is full."""
        if graph.cursor == -1:
            graph.cursor = len(graph.swapped) - 1
        window = self._prefetch_window()
        while graph.cursor >= 0:
            h = graph.swapped[graph.cursor]()
            if h is None:                  # autograd let it go: not needed any more
                graph.cursor -= 1
                continue
            if h.dev is None:
                if graph.ahead and graph.ahead + h.nbytes > window:
                    return
                self._fetch(h)
            graph.cursor -= 1

    # -- reporting ---------------------------------------------------------------------
    def _block_name(self, b: Optional[int]) -> str:
        return self.blocks[b][0] if b is not None else type(self.model).__name__

    def _oom(self, e: Exception, where: str) -> Exception:
        first = str(e).splitlines()[0] if str(e) else "out of memory"
        return torch.OutOfMemoryError(f"out of GPU memory in {where} with an LMS budget of {self.budget} bytes "
                                      f"({self.stats_.plan}): {first}")

    def _collect_waits(self) -> None:
        seconds, n = self.transfer.late_waits() if self.active else (0.0, 0)
        self.stats_.wait_s += seconds
        self.stats_.late_copies += n

    def stats(self) -> Stats:
        self._collect_waits()
        s = self.stats_
        s.peak_bytes = self.transfer.peak() if self.active else 0
        return Stats(**vars(s))

    def replan(self) -> None:
        """Profile the next step again (e.g. after changing the batch size by hand)."""
        self._start_profile()


class _KeptStorage:
    """A kept storage on the host stand-in: its bytes count as device bytes, once, while any kept
    view of it (``_Kept``) lives."""
    __slots__ = ("transfer", "nbytes", "__weakref__")

    def __init__(self, nbytes: int, transfer) -> None:
        self.transfer, self.nbytes = transfer, nbytes
        transfer.account(nbytes)

    def __del__(self):
        self.transfer.account(-self.nbytes)


class _Kept:
    """A kept view on the host stand-in: holds its storage's count until autograd drops it."""
    __slots__ = ("t", "keeper")

    def __init__(self, t, keeper: _KeptStorage):
        self.t, self.keeper = t, keeper


class _Recompute:
    """Around a block's recompute in backward: BatchNorm statistics restored, timeline span."""

    def __init__(self, session: Session, first: int, last: int) -> None:
        self.names = [session.blocks[k][0] for k in range(first, last + 1)]   # the unit as it runs
        self.freeze = _FreezeNorm([session.blocks[k][1] for k in range(first, last + 1)])
        self.t0 = 0.0

    def __enter__(self):
        self.t0 = time.perf_counter()
        self.freeze.__enter__()
        return self

    def __exit__(self, *exc):
        self.freeze.__exit__(*exc)
        tl = _timeline()
        if tl is not None:
            names = self.names
            tl.span("LMS_RECOMPUTE", 1, self.t0, time.perf_counter(),
                    {"block": names[0] if len(names) == 1 else f"{names[0]} .. {names[-1]} ({len(names)} blocks)"})
        return False


def _compiling() -> bool:
    return torch.compiler.is_compiling()


def _compiled_note() -> None:
    warn_once("compiled", "LMS: off for the torch.compile'd part of the model (saved-tensor hooks do not "
                          "apply inside compiled regions); the eager parts use it")


def _default_transfer(model: nn.Module) -> Optional[Transfer]:
    import os
    standin = os.environ.get("DDL_LMS_STANDIN_BYTES", "").strip()
    if standin:
        if not standin.isdigit():
            raise LmsError(f"DDL_LMS_STANDIN_BYTES={standin!r}: expected bytes (an integer)")
        return HostStandIn(int(standin))
    device = next((p.device for p in model.parameters()), torch.device("cpu"))
    if device.type != "cuda":
        warn_once("cpu", "LMS: no GPU (the model is on the CPU): nothing to move, training runs without LMS")
        return None
    return CudaTransfer(device)


def _is_keras(model) -> bool:
    return any(c.__module__.split(".")[0] == "keras" for c in type(model).__mro__)
