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
    input (which the recompute needs, so it stays, or is swapped as a last resort).
Tensors saved first are swapped first (they wait longest for their use in backward, so their
copy back has the most time); tensors of the last blocks are never worth swapping.
Nothing moves when everything fits.
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
    swap_inputs: frozenset = frozenset()    # recomputed blocks whose inputs (kept by the recompute) are swapped

    @property
    def moves(self) -> bool:
        return bool(self.swapped_bytes or self.recompute)

    def describe(self) -> str:
        mb = 1 << 20
        return (f"kept {self.kept_bytes / mb:.1f} MB, swapped {self.swapped_bytes / mb:.1f} MB, "
                f"recomputed {self.recomputed_bytes / mb:.1f} MB in {len(self.recompute)} blocks "
                f"(activation budget {self.budget_bytes / mb:.1f} MB, predicted +{self.extra_s * 1e3:.1f} ms/step"
                f"{'' if self.fits else ', predicted over budget'})")


def keep_all(profile: Profile, budget_bytes: int) -> Plan:
    n = profile.saved_bytes
    return Plan(tuple(KEEP for _ in profile.tensors), frozenset(), budget_bytes, n, 0, 0, 0.0, n <= budget_bytes)


def peak_bytes(profile: Profile, plan: Plan) -> int:
    """The most saved-activation bytes on the device at once under ``plan``: at the end of forward,
    or in backward while a block is recomputed (the blocks after it are freed by then, those
    before it still hold what they keep)."""
    held = [0] * len(profile.blocks)
    loose = 0
    for t, d in zip(profile.tensors, plan.tensors):
        if d == KEEP:
            if t.block is None:
                loose += t.nbytes
            else:
                held[t.block] += t.nbytes
    for b in plan.recompute - plan.swap_inputs:
        held[b] += profile.blocks[b].input_bytes
    peak = loose + sum(held)
    upto = loose
    for b in range(len(profile.blocks)):
        upto += held[b]
        if b in plan.recompute:
            peak = max(peak, upto + profile.block_bytes(b))
    return peak


def make_plan(profile: Profile, budget_bytes: int, min_swap_bytes: int = 1 << 20) -> Plan:
    """The plan for ``profile`` within ``budget_bytes`` of saved activations, recomputes
    included (``peak_bytes``).  Tensors under ``min_swap_bytes`` are never swapped (WML CE's
    ``set_size_lms``)."""
    target = budget_bytes
    plan = _plan_once(profile, target, min_swap_bytes)
    for _ in range(8):
        over = peak_bytes(profile, plan) - budget_bytes
        if over <= 0 or target <= 0:
            break
        target = max(0, target - over)
        plan = _plan_once(profile, target, min_swap_bytes)
    if peak_bytes(profile, plan) > budget_bytes and plan.fits:
        plan = dataclasses.replace(plan, fits=False)
    return dataclasses.replace(plan, budget_bytes=budget_bytes)


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
                excess <= 0, frozenset(swap_inputs))
