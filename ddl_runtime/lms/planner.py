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

Two plans are made and the one predicted faster (that fits) is taken: block by block (swaps
where they hide, then the blocks that free the most bytes per second of recompute, then paid
swaps), and by segments (the free swaps, then every other block recomputed in segments, then
blocks kept back, most expensive per byte first, while the peak stays in the budget).  On a
PCIe link the second wins: ResNet-152 at batch 256 in 16 GiB keeps 49 block inputs (13 GB)
block by block, and a few segment inputs by segments (benchmarks/lms_predict.py).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import List, Optional, Tuple

KEEP, SWAP, RECOMPUTE = "keep", "swap", "recompute"
OVERLAP = 0.8          # the share of compute time copies are expected to hide behind


@dataclass(frozen=True)
class SavedTensor:
    block: Optional[int]   # index into Profile.blocks; None: saved outside any block
    nbytes: int


@dataclass(frozen=True)
class BlockProfile:
    name: str
    forward_s: float
    input_bytes: int       # what a recompute keeps (the block's inputs)
    recomputable: bool = True
    chains: bool = False   # its only input is the previous block's output: it may join its segment


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
    or in backward while a unit is recomputed (the blocks after it are freed by then, those
    before it still hold what they keep, and the whole unit's tensors are back at once)."""
    held = [0] * len(profile.blocks)
    loose = 0
    for t, d in zip(profile.tensors, plan.tensors):
        if d == KEEP:
            if t.block is None:
                loose += t.nbytes
            else:
                held[t.block] += t.nbytes
    units = plan.units()
    for first, _ in units:
        if first not in plan.swap_inputs:
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
    for i, t in enumerate(profile.tensors):     # the swaps that hide behind compute, earliest first
        if excess <= 0 or swapped + t.nbytes > free_swap:
            break
        if t.nbytes >= min_swap_bytes and not (last is not None and t.block == last):
            decision[i] = SWAP
            swapped += t.nbytes
            excess -= t.nbytes
    by_block: dict = {}
    for i, t in enumerate(profile.tensors):
        if t.block is not None:
            by_block.setdefault(t.block, []).append(i)
    movable = [b for b, block in enumerate(profile.blocks)
               if block.recomputable and b in by_block and all(decision[i] == KEEP for i in by_block[b])]
    if not movable:
        return None
    kept = [0] * len(profile.blocks)
    loose = 0
    for t, d in zip(profile.tensors, decision):
        if d == KEEP:
            if t.block is None:
                loose += t.nbytes
            else:
                kept[t.block] += t.nbytes

    def plan_for(recomputed: set, cap: int) -> Plan:
        d = list(decision)
        for b in recomputed:
            for i in by_block[b]:
                d[i] = RECOMPUTE
        units = _segments(profile, recomputed, kept, loose, budget_bytes, cap)
        kept_bytes = sum(t.nbytes for t, x in zip(profile.tensors, d) if x == KEEP)
        kept_bytes += sum(profile.blocks[a].input_bytes for a, _ in units)
        recomputed_bytes = sum(t.nbytes for t, x in zip(profile.tensors, d) if x == RECOMPUTE)
        extra = sum(profile.blocks[b].forward_s for b in recomputed)
        return Plan(tuple(d), frozenset(recomputed), budget_bytes, kept_bytes, swapped, recomputed_bytes, extra,
                    True, frozenset(), units)

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
    order = [i for i, t in enumerate(profile.tensors)
             if t.nbytes >= min_swap_bytes and not (last is not None and t.block == last)]
    pos = 0           # next swap candidate in `order`
    swapped = 0
    extra = 0.0
    # 1. swaps that hide behind compute
    while excess > 0 and pos < len(order) and swapped + profile.tensors[order[pos]].nbytes <= free_swap:
        i = order[pos]
        decision[i] = SWAP
        swapped += profile.tensors[i].nbytes
        excess -= profile.tensors[i].nbytes
        pos += 1
    # 2. the rest: recompute a block where it frees more bytes per second than a stalled copy
    recompute = set()
    candidates = []
    for b, block in enumerate(profile.blocks):
        if not block.recomputable:
            continue
        idx = [i for i, t in enumerate(profile.tensors) if t.block == b]
        if any(decision[i] != KEEP for i in idx):
            continue
        freed = sum(profile.tensors[i].nbytes for i in idx) - block.input_bytes
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
            # skip a block whose tensors were swapped meanwhile
            ratio, b, freed, idx = cand
            ci += 1
            if any(decision[i] != KEEP for i in idx):
                continue
            recompute.add(b)
            for i in idx:
                decision[i] = RECOMPUTE
            excess -= freed
            extra += profile.blocks[b].forward_s
        elif nxt is not None:
            decision[nxt] = SWAP
            nbytes = profile.tensors[nxt].nbytes
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
        if nbytes < min_swap_bytes or b == last:
            continue
        swap_inputs.add(b)
        swapped += nbytes
        excess -= nbytes
        extra += max(0.0, min(nbytes, swapped - free_swap)) / bw
    kept = sum(t.nbytes for t, d in zip(profile.tensors, decision) if d == KEEP)
    recomputed = sum(t.nbytes for t, d in zip(profile.tensors, decision) if d == RECOMPUTE)
    kept += sum(profile.blocks[b].input_bytes for b in recompute - swap_inputs)
    return Plan(tuple(decision), frozenset(recompute), budget_bytes, kept, swapped, recomputed, extra,
                excess <= 0, frozenset(swap_inputs), tuple((b, b) for b in sorted(recompute)))
