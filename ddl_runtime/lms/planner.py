"""The LMS planner: pure Python, no torch.  From one profiled step (the bytes of each saved
tensor in forward order, each block's forward time, the host<->device bandwidth) and a budget,
it decides for every saved tensor: keep it on the device, swap it to host memory, or recompute
its block in backward.

The cost model:
  * keeping is free while the kept bytes fit the activation budget;
  * swapping is free while the copies hide behind compute: a copy out overlaps the forward of
    the later blocks, a copy back the backward of the later blocks (about twice the forward),
    so up to ``bandwidth * forward_time * OVERLAP`` bytes move at no cost; each further byte
    costs ``1 / bandwidth`` seconds of waiting;
  * recomputing a block costs its forward time again and frees its saved bytes less its
    input (which the recompute needs, so it stays, or is swapped as a last resort);
  * a run of blocks that chain (each one's only input is the previous one's output: the
    children of an ``nn.Sequential``) can be recomputed as one segment, which keeps only the
    first block's input; in backward the whole segment's saved tensors are back on the device
    at once, so a segment is as long as the budget allows at that point of backward.
Tensors saved first are swapped first (they wait longest for their use in backward, so their
copy back has the most time); tensors of the last blocks are never worth swapping.
Nothing moves when everything fits.

Device memory is held by storages, not by the tensors saved: autograd often saves several views
of one storage (attention's q, k and v sliced from one projection; a transposed weight input; a
block's output that the next block saves again), and the storage is freed only when none of them
holds it.  So the profile names, for every saved tensor, the storage it views (``SavedTensor.storage``:
its first view's index; only that first view carries the storage's bytes), and every decision is
made per storage: a storage is swapped with all its views, kept while any view is kept, and freed
by recompute only when every view of it lies in recomputed blocks.  A recomputed unit's input
costs nothing more where its storage is held anyway (``BlockProfile.input_storage``).  The peak
(``peak_bytes``) and the bytes a plan reports count storages, so the device holds what the plan says.

Two plans are made and the one predicted faster (that fits) is taken: block by block (swaps
where they hide, then the blocks that free the most bytes per second of recompute, then paid
swaps), and by segments (the free swaps, then every other block recomputed in segments, then
blocks kept back, most expensive per byte first, while the peak stays in the budget).  On a
PCIe link the second wins: ResNet-152 at batch 256 in 16 GiB keeps 49 block inputs (13 GB)
block by block, and a few segment inputs by segments (benchmarks/lms_predict.py).
"""
from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Dict, List, Optional, Set, Tuple

KEEP, SWAP, RECOMPUTE = "keep", "swap", "recompute"
OVERLAP = 0.8          # the share of compute time copies are expected to hide behind


@dataclass(frozen=True)
class SavedTensor:
    block: Optional[int]   # index into Profile.blocks; None: saved outside any block
    nbytes: int            # its storage's bytes where it is the first view of it saved; 0 for the others
    storage: Optional[int] = None   # the index of the first view saved of its storage (None: this one)


@dataclass(frozen=True)
class BlockProfile:
    name: str
    forward_s: float
    input_bytes: int       # what a recompute keeps (the block's inputs)
    recomputable: bool = True
    chains: bool = False   # its only input is the previous block's output: it may join its segment
    input_storage: Optional[int] = None   # the saved storage (its first view's index) its input views, if any


@dataclass(frozen=True)
class Profile:
    tensors: Tuple[SavedTensor, ...]       # in the order forward saved them
    blocks: Tuple[BlockProfile, ...]
    bandwidth_Bps: float                    # host<->device, measured once per process

    def block_bytes(self, b: int) -> int:
        return sum(t.nbytes for t in self.tensors if t.block == b)

    @property
    def forward_s(self) -> float:
        return sum(b.forward_s for b in self.blocks)

    @property
    def saved_bytes(self) -> int:
        return sum(t.nbytes for t in self.tensors)

    def root(self, i: int) -> int:
        """The storage of saved tensor i: the index of its first view saved."""
        r = self.tensors[i].storage
        return i if r is None else r

    @functools.cached_property
    def storages(self) -> Dict[int, Tuple[int, ...]]:
        """Each storage (its first view's index) and the indices of every view of it saved, in order."""
        out: Dict[int, List[int]] = {}
        for i in range(len(self.tensors)):
            out.setdefault(self.root(i), []).append(i)
        return {r: tuple(m) for r, m in out.items()}

    def storage_bytes(self, root: int) -> int:
        return sum(self.tensors[i].nbytes for i in self.storages[root])

    def storage_blocks(self, root: int) -> Set[Optional[int]]:
        return {self.tensors[i].block for i in self.storages[root]}


@dataclass(frozen=True)
class Plan:
    tensors: Tuple[str, ...]                # KEEP / SWAP / RECOMPUTE per Profile.tensors entry
    recompute: frozenset                    # block indices recomputed in backward
    budget_bytes: int                       # the activation budget the plan was made for
    kept_bytes: int
    swapped_bytes: int
    recomputed_bytes: int
    extra_s: float                          # predicted time added per step
    fits: bool                              # False: even moving everything predicted over budget
    swap_inputs: frozenset = frozenset()    # recomputed units (first block) whose inputs are swapped
    segments: Tuple[Tuple[int, int], ...] = ()   # (first, last) block of each unit recomputed as one

    @property
    def moves(self) -> bool:
        return bool(self.swapped_bytes or self.recompute)

    def units(self) -> Tuple[Tuple[int, int], ...]:
        """The recompute units: the segments, or one per recomputed block."""
        return self.segments or tuple((b, b) for b in sorted(self.recompute))

    def unit_of(self, b: int) -> Optional[Tuple[int, int]]:
        return next((u for u in self.units() if u[0] <= b <= u[1]), None)

    def describe(self) -> str:
        mb = 1 << 20
        units = self.units()
        longest = max((b - a + 1 for a, b in units), default=0)
        how = (f" ({len(units)} segments, up to {longest} blocks each)" if longest > 1 else "")
        return (f"kept {self.kept_bytes / mb:.1f} MB, swapped {self.swapped_bytes / mb:.1f} MB, "
                f"recomputed {self.recomputed_bytes / mb:.1f} MB in {len(self.recompute)} blocks{how} "
                f"(activation budget {self.budget_bytes / mb:.1f} MB, predicted +{self.extra_s * 1e3:.1f} ms/step"
                f"{'' if self.fits else ', predicted over budget'})")


def keep_all(profile: Profile, budget_bytes: int) -> Plan:
    n = profile.saved_bytes
    return Plan(tuple(KEEP for _ in profile.tensors), frozenset(), budget_bytes, n, 0, 0, 0.0, n <= budget_bytes)


def peak_bytes(profile: Profile, plan: Plan) -> int:
    """The most saved-activation bytes on the device at once under ``plan``: at the end of forward,
    or in backward while a unit is recomputed (the blocks after it are freed by then, those before
    it still hold what they keep, and the whole unit's tensors are back at once).  A storage held by
    any view kept counts once, in the block that saved it first; a recomputed unit's input counts
    unless its storage is held (or swapped) anyway."""
    held = [0] * len(profile.blocks)
    loose = 0
    resident = _resident(profile, plan.tensors)
    for root in resident:
        block = profile.tensors[root].block
        if block is None:
            loose += profile.storage_bytes(root)
        else:
            held[block] += profile.storage_bytes(root)
    units = plan.units()
    for first, _ in units:
        if first not in plan.swap_inputs and not _input_covered(profile, first, plan.tensors):
            held[first] += profile.blocks[first].input_bytes
    peak = loose + sum(held)
    ends = {last: first for first, last in units}
    upto = loose
    for b in range(len(profile.blocks)):
        upto += held[b]
        if b in ends:
            first = ends[b]
            peak = max(peak, upto + sum(profile.block_bytes(k) for k in range(first, b + 1)))
    return peak


def _resident(profile: Profile, decision) -> List[int]:
    """The storages some kept view holds on the device."""
    return [r for r, members in profile.storages.items() if any(decision[i] == KEEP for i in members)]


def _input_covered(profile: Profile, b: int, decision) -> bool:
    """Block b's input views a storage that is kept or swapped with its views anyway (the previous
    block's output, saved there): its recompute keeps nothing more."""
    r = profile.blocks[b].input_storage
    return r is not None and r in profile.storages and \
        any(decision[i] in (KEEP, SWAP) for i in profile.storages[r])


def _account(profile: Profile, decision, units, swap_inputs) -> Tuple[int, int, int]:
    """(kept, swapped, recomputed) bytes, storage by storage, the recomputed units' inputs included."""
    kept = swapped = recomputed = 0
    for r, members in profile.storages.items():
        n = profile.storage_bytes(r)
        ds = {decision[i] for i in members}
        if KEEP in ds:
            kept += n
        elif SWAP in ds:
            swapped += n
        else:
            recomputed += n
    for first, _ in units:
        if _input_covered(profile, first, decision):
            continue
        if first in swap_inputs:
            swapped += profile.blocks[first].input_bytes
        else:
            kept += profile.blocks[first].input_bytes
    return kept, swapped, recomputed


def _swap_order(profile: Profile, min_swap_bytes: int, last: Optional[int]) -> List[int]:
    """The storages that may be swapped, first saved first: at least ``min_swap_bytes``, and no
    view of them saved by the last block (used first in backward: a copy back would have no time)."""
    return [r for r in profile.storages
            if profile.storage_bytes(r) >= min_swap_bytes and profile.storage_bytes(r) > 0
            and (last is None or last not in profile.storage_blocks(r))]


def _swap_storage(profile: Profile, decision: List[str], root: int) -> int:
    """Swap the storage with every view of it (those in recomputed blocks are not saved); its bytes."""
    for i in profile.storages[root]:
        if decision[i] != RECOMPUTE:
            decision[i] = SWAP
    return profile.storage_bytes(root)


def _freed_by(profile: Profile, b: int) -> int:
    """The bytes recomputing block b alone frees: the storages only it saves, less its input unless
    that input's storage is saved outside b too (the previous block's output: held anyway)."""
    own = sum(profile.storage_bytes(r) for r, members in profile.storages.items()
              if all(profile.tensors[i].block == b for i in members))
    block = profile.blocks[b]
    r = block.input_storage
    held = r is not None and r in profile.storages and any(profile.tensors[i].block != b for i in profile.storages[r])
    return own - (0 if held else block.input_bytes)


def make_plan(profile: Profile, budget_bytes: int, min_swap_bytes: int = 1 << 20) -> Plan:
    """The plan for ``profile`` within ``budget_bytes`` of saved activations, recomputes
    included (``peak_bytes``).  Tensors under ``min_swap_bytes`` are never swapped (WML CE's
    ``set_size_lms``).  The faster of the block-by-block and the segment plan (module docstring)."""
    plan = _fitted(profile, budget_bytes, lambda target: _plan_once(profile, target, min_swap_bytes))
    if plan.moves and any(b.chains for b in profile.blocks):
        seg = _plan_segments(profile, budget_bytes, min_swap_bytes)
        if seg is not None and (not plan.fits or seg.extra_s < plan.extra_s):
            plan = seg
    return dataclasses.replace(plan, budget_bytes=budget_bytes)


def _fitted(profile: Profile, budget_bytes: int, planned) -> Plan:
    """``planned(target)`` with the target lowered until the plan's peak is in the budget."""
    target = budget_bytes
    plan = planned(target)
    for _ in range(8):
        over = peak_bytes(profile, plan) - budget_bytes
        if over <= 0 or target <= 0:
            break
        target = max(0, target - over)
        plan = planned(target)
    if peak_bytes(profile, plan) > budget_bytes and plan.fits:
        plan = dataclasses.replace(plan, fits=False)
    return plan


def _segments(profile: Profile, recomputed: set, kept: List[int], loose: int, budget_bytes: int, cap: int
              ) -> Tuple[Tuple[int, int], ...]:
    """The recomputed blocks cut into units, front to back: a unit takes the next block while that
    block chains to it, the unit's saved bytes stay within ``cap`` and its recompute (what is held
    before it, its input and every block's saved bytes) within the budget.  ``kept``: per block,
    the bytes it keeps."""
    units: List[List[int]] = []
    held = loose            # bytes held on the device before the open unit
    size = 0                # the open unit's saved bytes
    for b, block in enumerate(profile.blocks):
        if b not in recomputed:
            held += kept[b]
            continue
        nbytes = profile.block_bytes(b)
        if units and units[-1][1] == b - 1 and block.chains and size + nbytes <= cap and \
                held + profile.blocks[units[-1][0]].input_bytes + size + nbytes <= budget_bytes:
            units[-1][1] = b
            size += nbytes
            continue
        if units:
            held += profile.blocks[units[-1][0]].input_bytes
        units.append([b, b])
        size = nbytes
    return tuple((a, z) for a, z in units)


def _plan_segments(profile: Profile, budget_bytes: int, min_swap_bytes: int) -> Optional[Plan]:
    """The segment plan (module docstring); None when it does not fit."""
    n = len(profile.tensors)
    decision: List[str] = [KEEP] * n
    bw = max(profile.bandwidth_Bps, 1.0)
    free_swap = bw * profile.forward_s * OVERLAP
    last = max((t.block for t in profile.tensors if t.block is not None), default=None)
    excess = profile.saved_bytes - budget_bytes
    swapped = 0
    for r in _swap_order(profile, min_swap_bytes, last):     # the swaps that hide behind compute, earliest first
        nbytes = profile.storage_bytes(r)
        if excess <= 0 or swapped + nbytes > free_swap:
            break
        swapped += _swap_storage(profile, decision, r)
        excess -= nbytes
    by_block: dict = {}
    for i, t in enumerate(profile.tensors):
        if t.block is not None:
            by_block.setdefault(t.block, []).append(i)
    movable = [b for b, block in enumerate(profile.blocks)
               if block.recomputable and b in by_block and _own_kept(profile, decision, b, by_block[b])]
    if not movable:
        return None
    kept = [0] * len(profile.blocks)
    loose = 0
    for r in _resident(profile, decision):
        block = profile.tensors[r].block
        if block is None:
            loose += profile.storage_bytes(r)
        else:
            kept[block] += profile.storage_bytes(r)

    def plan_for(recomputed: set, cap: int) -> Plan:
        d = list(decision)
        for b in recomputed:
            for i in by_block[b]:
                d[i] = RECOMPUTE
        units = _segments(profile, recomputed, kept, loose, budget_bytes, cap)
        kept_bytes, swapped_bytes, recomputed_bytes = _account(profile, d, units, ())
        extra = sum(profile.blocks[b].forward_s for b in recomputed)
        return Plan(tuple(d), frozenset(recomputed), budget_bytes, kept_bytes, swapped_bytes, recomputed_bytes,
                    extra, True, frozenset(), units)

    best = None
    cap = float(max(1, min(profile.block_bytes(b) for b in movable)))   # a block may save 0 new bytes
    dearest = sorted(movable, key=lambda k: -profile.blocks[k].forward_s / max(profile.block_bytes(k), 1))
    while True:      # segment sizes from one block's bytes up, by a quarter at a time
        recomputed = set(movable)
        plan = plan_for(recomputed, int(cap))
        if peak_bytes(profile, plan) <= budget_bytes:
            # keep back the blocks dearest to recompute per byte while the peak stays in the budget
            for b in dearest:
                trial = plan_for(recomputed - {b}, int(cap))
                if peak_bytes(profile, trial) <= budget_bytes:
                    recomputed.discard(b)
                    plan = trial
            if best is None or plan.extra_s < best.extra_s:
                best = plan
        if cap >= profile.saved_bytes:
            return best
        cap = min(cap * 1.25, float(profile.saved_bytes))


def _own_kept(profile: Profile, decision, b: int, idx) -> bool:
    """No storage first saved in block b is swapped (views of earlier storages may be: their
    storage goes to the host whether b is recomputed or not)."""
    return all(decision[i] == KEEP for i in idx if profile.tensors[profile.root(i)].block == b)


def _plan_once(profile: Profile, budget_bytes: int, min_swap_bytes: int) -> Plan:
    total = profile.saved_bytes
    if total <= budget_bytes:
        return keep_all(profile, budget_bytes)
    excess = total - budget_bytes
    decision: List[str] = [KEEP] * len(profile.tensors)
    bw = max(profile.bandwidth_Bps, 1.0)
    free_swap = bw * profile.forward_s * OVERLAP
    # the last block's tensors are used first in backward: a copy back would have no time
    last = max((t.block for t in profile.tensors if t.block is not None), default=None)
    order = _swap_order(profile, min_swap_bytes, last)     # storages, first saved first
    pos = 0           # next swap candidate in `order`
    swapped = 0
    extra = 0.0
    # 1. swaps that hide behind compute
    while excess > 0 and pos < len(order) and swapped + profile.storage_bytes(order[pos]) <= free_swap:
        nbytes = _swap_storage(profile, decision, order[pos])
        swapped += nbytes
        excess -= nbytes
        pos += 1
    # 2. the rest: recompute a block where it frees more bytes per second than a stalled copy
    recompute = set()
    candidates = []
    for b, block in enumerate(profile.blocks):
        if not block.recomputable:
            continue
        idx = [i for i, t in enumerate(profile.tensors) if t.block == b]
        if not _own_kept(profile, decision, b, idx):
            continue
        freed = _freed_by(profile, b)
        if freed > 0:
            candidates.append((freed / max(block.forward_s, 1e-9), b, freed, idx))
    candidates.sort(key=lambda c: -c[0])
    ci = 0
    while excess > 0:
        nxt = None
        while pos < len(order) and decision[order[pos]] != KEEP:
            pos += 1
        if pos < len(order):
            nxt = order[pos]
        while ci < len(candidates) and candidates[ci][1] in recompute:
            ci += 1
        cand = candidates[ci] if ci < len(candidates) else None
        if cand is not None and (nxt is None or cand[0] >= bw):
            # skip a block whose storages were swapped meanwhile
            ratio, b, freed, idx = cand
            ci += 1
            if not _own_kept(profile, decision, b, idx):
                continue
            recompute.add(b)
            for i in idx:
                decision[i] = RECOMPUTE
            excess -= freed
            extra += profile.blocks[b].forward_s
        elif nxt is not None:
            nbytes = _swap_storage(profile, decision, nxt)
            swapped += nbytes
            excess -= nbytes
            extra += max(0.0, min(nbytes, swapped - free_swap)) / bw
            pos += 1
        else:
            break
    # 3. still over: the inputs a recompute keeps go to the host too, earliest block first
    swap_inputs = set()
    for b in sorted(recompute):
        if excess <= 0:
            break
        nbytes = profile.blocks[b].input_bytes
        if nbytes < min_swap_bytes or b == last or _input_covered(profile, b, decision):
            continue
        swap_inputs.add(b)
        swapped += nbytes
        excess -= nbytes
        extra += max(0.0, min(nbytes, swapped - free_swap)) / bw
    units = tuple((b, b) for b in sorted(recompute))
    kept, swapped_bytes, recomputed = _account(profile, decision, units, swap_inputs)
    return Plan(tuple(decision), frozenset(recompute), budget_bytes, kept, swapped_bytes, recomputed, extra,
                excess <= 0, frozenset(swap_inputs), units)
