#!/usr/bin/env python
"""Training-scaling benchmark: samples/s of train_digits.py's training step, 1 rank vs N ranks.

    python examples/bench_scaling.py --batch-size 32 --steps 200 --repeats 15 --independent --lockstep
    python examples/bench_scaling.py --mode jobs --batch-size 32 --repeats 5 --independent
    python examples/bench_scaling.py --batch-size 32 --steps 200 --repeats 15 --independent --floor --horovod

Every configuration runs the example's own step (forward, backward with the gradient
reductions started from hooks, averaged SGD update) on the rank's shard of the digits data,
one torch thread per rank and the same per-rank batch for every K (weak scaling).  The
distributed model uses ddl_runtime.torch's DistributedOptimizer, or with --horovod
Horovod's (``hvd.DistributedOptimizer``, what an unchanged Horovod script runs).

--mode phases (default): ONE ``mpiexec -n K`` job alternates short phases, --repeats times
each: rank 0 alone (the others sleep), K ranks training the distributed model, and with
--independent / --lockstep K ranks training plain copies without / with a barrier per step,
and with --floor K ranks averaging plain copies by hand (one mpi4py Allreduce of the flat
gradients per step: the least a synchronous step exchanges).  Phases of one repeat run back to back and swap order every repeat, so they see the same
machine; the report gives medians and per-repeat ratios.  This is the low-noise form.

--mode jobs: separate fresh jobs per configuration (1,K then K,1, ...), medians over repeats.

    scaling efficiency = median samples/s on K ranks / (K x median samples/s on 1 rank)
    of independent ranks = K-rank phase / the K-independent phase of the same repeat
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def worker(args: argparse.Namespace) -> int:
    import torch

    sys.path.insert(0, HERE)
    import train_digits

    import ddl_runtime
    import ddl_runtime.torch as ddl

    torch.set_num_threads(1)
    ddl.init()
    rank, size = ddl.rank(), ddl.size()
    x, y, _, _ = train_digits.load_data()
    idx = torch.tensor(ddl.shard_indices(len(y), shuffle=True, seed=0))
    xs, ys = x[idx], y[idx]
    b = args.batch_size
    nb = max(1, len(ys) // b)
    batches = [(xs[i * b:(i + 1) * b].contiguous(), ys[i * b:(i + 1) * b].contiguous()) for i in range(nb)]

    torch.manual_seed(0)
    model = train_digits.DigitsNet()
    opt = torch.optim.SGD(model.parameters(), lr=ddl.scale_lr(0.01), momentum=0.9)
    if not args.no_comm:
        opt = distributed_optimizer(args, opt, model)
        ddl.broadcast_parameters(model.state_dict(), root_rank=0)

    lockstep = args.lockstep_worker and size > 1  # a barrier after every step, no gradients exchanged
    for i in range(args.warmup):
        train_digits.train_step(model, opt, *batches[i % nb])
        if lockstep:
            ddl_runtime.barrier()
    if size > 1:
        ddl_runtime.barrier()
    t0 = time.perf_counter()
    for i in range(args.steps):
        train_digits.train_step(model, opt, *batches[i % nb])
        if lockstep:
            ddl_runtime.barrier()
    if size > 1:
        ddl_runtime.barrier()
    elapsed = time.perf_counter() - t0
    if rank == 0:
        result = {"ranks": size, "batch_size": b, "steps": args.steps, "seconds": elapsed,
                  "samples_per_s": size * b * args.steps / elapsed,
                  "step_ms": 1000 * elapsed / args.steps, "loadavg": os.getloadavg()[0]}
        with open(args.worker, "w") as fh:
            json.dump(result, fh)
    return 0


def distributed_optimizer(args: argparse.Namespace, opt, model):
    """The distributed model's optimizer: ddl_runtime.torch's, or with --horovod Horovod's
    (``hvd.DistributedOptimizer`` of ddl_runtime's Horovod layer, as an unchanged Horovod script
    gets it)."""
    if args.horovod:
        import ddl_runtime.horovod.torch as hvd

        return hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    import ddl_runtime.torch as ddl

    return ddl.DistributedOptimizer(opt, named_parameters=model.named_parameters(),
                                    gradient_as_bucket_view=args.gradient_as_bucket_view)


def cpu_busy(seconds: float = 1.0) -> float:
    """Fraction of all CPUs busy (other work on the machine) over `seconds`, from /proc/stat."""
    def sample():
        with open("/proc/stat") as fh:
            values = [int(v) for v in fh.readline().split()[1:]]
        idle = values[3] + values[4]  # idle + iowait
        return idle, sum(values[:8])

    try:
        i0, t0 = sample()
        time.sleep(seconds)
        i1, t1 = sample()
    except OSError:
        return 0.0
    return 1.0 - (i1 - i0) / max(1, t1 - t0)


def wait_quiet(args: argparse.Namespace) -> float:
    """Wait (up to --max-wait s) until other work keeps less than --max-busy of the CPUs busy."""
    deadline = time.monotonic() + args.max_wait
    busy = cpu_busy()
    while busy > args.max_busy and time.monotonic() < deadline:
        busy = cpu_busy()
    return busy


def phases_worker(args: argparse.Namespace) -> int:
    """One job of K ranks alternating two (or three) kinds of phase, --repeats times each:

    - "1 rank": rank 0 trains a plain (non-distributed) copy of the model alone while the
      other ranks sleep (they poll a non-blocking MPI barrier every millisecond, so they
      leave the CPUs to it): what a single-process run gets from the machine at that moment;
    - "K independent" (with --independent): every rank trains its own plain copy on its own
      shard at the same time, exchanging nothing: what K processes get from the machine;
    - "K in lockstep" (with --lockstep): as "K independent", plus a barrier after every step:
      the ceiling of any synchronous data-parallel step on the machine;
    - "K with one Allreduce" (with --floor): every rank trains a plain copy and averages its
      gradients by hand before each update: one torch.cat, one mpi4py Allreduce of the flat
      buffer, one divide and copy back; no hooks, no checks, no overlap: the least a
      synchronous data-parallel step can exchange, what the runtime is measured against;
    - "K ranks": every rank trains the distributed model (averaged gradients).

    Short phases alternating within one job see the same background load, so the ratio of
    their medians is robust on a shared machine.
    """
    import torch
    from mpi4py import MPI

    sys.path.insert(0, HERE)
    import train_digits

    import ddl_runtime
    import ddl_runtime.torch as ddl

    torch.set_num_threads(1)
    ddl.init()
    rank, size = ddl.rank(), ddl.size()
    comm = MPI.COMM_WORLD

    def quiet_barrier():
        req = comm.Ibarrier()
        while not req.Test():
            time.sleep(0.001)

    x, y, _, _ = train_digits.load_data()
    b = args.batch_size

    def batches_for(shard_rank, shard_size):
        idx = torch.tensor(ddl.shard_indices(len(y), shuffle=True, seed=0, rank_=shard_rank, size_=shard_size))
        xs, ys = x[idx], y[idx]
        n = max(1, len(ys) // b)
        return [(xs[i * b:(i + 1) * b].contiguous(), ys[i * b:(i + 1) * b].contiguous()) for i in range(n)]

    torch.manual_seed(0)
    dist_model = train_digits.DigitsNet()
    dist_opt = distributed_optimizer(
        args, torch.optim.SGD(dist_model.parameters(), lr=ddl.scale_lr(0.01), momentum=0.9), dist_model)
    ddl.broadcast_parameters(dist_model.state_dict(), root_rank=0)
    dist_batches = batches_for(rank, size)
    solo_model = train_digits.DigitsNet()
    solo_opt = torch.optim.SGD(solo_model.parameters(), lr=0.01, momentum=0.9)
    solo_batches = batches_for(0, 1)
    own_model = train_digits.DigitsNet()  # --independent: this rank's plain copy, on its shard
    own_opt = torch.optim.SGD(own_model.parameters(), lr=0.01, momentum=0.9)
    torch.manual_seed(0)
    floor_model = train_digits.DigitsNet()  # --floor: averaged by hand, one Allreduce per step
    floor_opt = HandAveraged(torch.optim.SGD(floor_model.parameters(), lr=0.01, momentum=0.9), comm)

    def train(model, opt, batches, steps, barrier=False):
        for i in range(steps):
            train_digits.train_step(model, opt, *batches[i % len(batches)])
            if barrier:
                ddl_runtime.barrier()

    def solo(steps):
        train(solo_model, solo_opt, solo_batches, steps)

    def together(steps):
        train(dist_model, dist_opt, dist_batches, steps)

    def independent(steps):
        train(own_model, own_opt, dist_batches, steps)

    def lockstep(steps):
        train(own_model, own_opt, dist_batches, steps, barrier=True)

    def floor(steps):
        train(floor_model, floor_opt, dist_batches, steps)

    if rank == 0:
        solo(args.warmup)
    together(args.warmup)
    if args.independent or args.lockstep:
        independent(args.warmup)
    if args.floor:
        floor(args.warmup)
    kinds = ("solo",) + (("independent",) if args.independent else ()) + (("lockstep",) if args.lockstep else ()) \
        + (("floor",) if args.floor else ()) + ("all",)
    rows = []
    for rep in range(args.repeats):
        for kind in (kinds if rep % 2 == 0 else tuple(reversed(kinds))):
            quiet_barrier()
            s0 = _busy_seconds()
            t0, c0 = time.perf_counter(), time.process_time()
            if kind == "solo":
                if rank == 0:
                    solo(args.steps)
            elif kind == "independent":
                independent(args.steps)
            elif kind == "lockstep":
                lockstep(args.steps)
            elif kind == "floor":
                floor(args.steps)
            else:
                together(args.steps)
            c1 = time.process_time()
            quiet_barrier()
            elapsed = time.perf_counter() - t0
            s1 = _busy_seconds()
            n = 1 if kind == "solo" else size
            # CPU seconds the training ranks used (busy-polling while waiting for a peer included)
            cpu = comm.allreduce(c1 - c0 if (kind == "all" or rank == 0) else 0.0)
            ours = comm.allreduce(time.process_time() - c0)  # every rank of this job, idle ones too
            # CPU time other processes used meanwhile, as a share of the whole machine
            other = max(0.0, (s1 - s0) - ours) / (elapsed * (os.cpu_count() or 1)) if s0 >= 0 else float("nan")
            rows.append({"kind": kind, "rep": rep, "ranks": n, "seconds": elapsed, "samples_per_s": n * b * args.steps / elapsed,
                         "step_ms": 1000 * elapsed / args.steps, "loadavg": os.getloadavg()[0],
                         "cpu_s": cpu, "samples_per_cpu_s": n * b * args.steps / cpu,
                         "other_share": other})
            if rank == 0:
                label = {"independent": f"{n} independent", "lockstep": f"{n} in lockstep",
                         "floor": f"{n} with one Allreduce"}.get(kind, f"{n} rank(s)")
                print(f"phase {len(rows):3d}: {label}: {rows[-1]['samples_per_s']:9.0f} samples/s "
                      f"({rows[-1]['step_ms']:.2f} ms/step; other processes used {100 * other:.0f} % of the CPUs)",
                      flush=True)
    # the distributed model stayed in sync through all of it
    divergence = ddl.parameters_max_divergence(dist_model)
    if args.floor and ddl.parameters_max_divergence(floor_model) != 0.0:
        raise SystemExit("bench_scaling: the hand-averaged model diverged between ranks")
    if rank == 0:
        with open(args.worker, "w") as fh:
            json.dump({"phases": rows, "max_divergence": divergence}, fh)
    return 0


class HandAveraged:
    """--floor's optimizer: before each update, the gradients averaged by hand in one flat
    mpi4py Allreduce (what a minimal hand-written data-parallel loop does)."""

    def __init__(self, inner, comm):
        self.inner, self.comm = inner, comm
        self.params = [p for g in inner.param_groups for p in g["params"]]

    def zero_grad(self):
        self.inner.zero_grad()

    def step(self):
        import torch
        from mpi4py import MPI

        grads = [p.grad for p in self.params]
        flat = torch.cat([g.reshape(-1) for g in grads])
        self.comm.Allreduce(MPI.IN_PLACE, flat.numpy())
        flat.div_(self.comm.size)
        torch._foreach_copy_(grads, [v.view_as(g) for v, g in zip(flat.split([g.numel() for g in grads]), grads)])
        self.inner.step()


def _busy_seconds() -> float:
    """CPU-seconds all processes have used since boot (/proc/stat), or -1 when unknown."""
    try:
        with open("/proc/stat") as fh:
            values = [int(v) for v in fh.readline().split()[1:8]]
    except OSError:
        return -1.0
    busy = sum(values) - values[3] - values[4]  # minus idle and iowait
    return busy / os.sysconf("SC_CLK_TCK")


def _efficiencies(rows, k):
    one = [r["samples_per_s"] for r in rows if r["kind"] == "solo"]
    many = [r["samples_per_s"] for r in rows if r["kind"] == "all"]
    if not one or not many:
        return None
    med1, medk = statistics.median(one), statistics.median(many)
    return {"phases_1": len(one), f"phases_{k}": len(many), "median_1": med1, f"median_{k}": medk,
            "efficiency": medk / (k * med1)}


def phases_driver(args: argparse.Namespace) -> int:
    mpiexec = shutil.which("mpiexec")
    if mpiexec is None:
        raise SystemExit("bench_scaling: mpiexec not found (pip install mpich mpi4py)")
    k = args.ranks
    fd, out = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    cmd = [mpiexec, "-n", str(k), sys.executable, os.path.abspath(__file__), "--phases-worker", "--worker", out,
           "--batch-size", str(args.batch_size), "--steps", str(args.steps), "--warmup", str(args.warmup),
           "--repeats", str(args.repeats)] + (["--independent"] if args.independent else []) \
        + (["--lockstep"] if args.lockstep else []) + (["--floor"] if args.floor else []) \
        + (["--gradient-as-bucket-view"] if args.gradient_as_bucket_view else []) \
        + (["--horovod"] if args.horovod else [])
    try:
        proc = subprocess.run(cmd, text=True, timeout=args.timeout, env=dict(os.environ, OMP_NUM_THREADS="1"))
        if proc.returncode != 0:
            raise SystemExit(f"bench_scaling: {' '.join(cmd)} failed ({proc.returncode})")
        with open(out) as fh:
            data = json.load(fh)
    except subprocess.TimeoutExpired:
        raise SystemExit(f"bench_scaling: {' '.join(cmd)} did not finish within {args.timeout} s") from None
    finally:
        os.unlink(out)
    rows = data["phases"]
    by_rep = {}
    for r in rows:  # the phases of one repeat ran back to back
        by_rep.setdefault(r["rep"], {})[r["kind"]] = r
    reps = [by_rep[i] for i in sorted(by_rep)]

    def speed(kind):
        return [r["samples_per_s"] for r in rows if r["kind"] == kind]

    def pair_ratios(kind, ref, scale, only_clean=False):
        return [rep[kind]["samples_per_s"] / (scale * rep[ref]["samples_per_s"]) for rep in reps
                if not only_clean or max(rep[kind]["other_share"], rep[ref]["other_share"]) <= args.clean]

    one, many = speed("solo"), speed("all")
    med1, medk = statistics.median(one), statistics.median(many)
    pairs = pair_ratios("all", "solo", k)
    cpu1 = statistics.median(r["samples_per_cpu_s"] for r in rows if r["kind"] == "solo")
    cpuk = statistics.median(r["samples_per_cpu_s"] for r in rows if r["kind"] == "all")
    summary = {"mode": "phases", "samples_per_cpu_s_1": cpu1, f"samples_per_cpu_s_{k}": cpuk,
               "cpu_efficiency": cpuk / cpu1, "machine": machine(), "ranks": k, "batch_size": args.batch_size,
               "steps": args.steps, "repeats": args.repeats, "samples_per_s_1": one,
               f"samples_per_s_{k}": many, "median_1": med1, f"median_{k}": medk,
               "efficiency": medk / (k * med1), "pair_efficiency_median": statistics.median(pairs),
               "pair_efficiency_range": [min(pairs), max(pairs)],
               "loadavg": [r["loadavg"] for r in rows], "max_divergence": data["max_divergence"]}
    print(f"\n1 rank: median {med1:,.0f} samples/s; {k} ranks: median {medk:,.0f} samples/s "
          f"({len(one)} phases each, {args.steps} steps of batch {args.batch_size} per rank)")
    print(f"scaling efficiency {100 * summary['efficiency']:.1f} % (per-pair median "
          f"{100 * summary['pair_efficiency_median']:.1f} %, range {100 * min(pairs):.1f}-{100 * max(pairs):.1f} %); "
          f"ranks in sync at the end: {data['max_divergence'] == 0.0}")
    print(f"CPU efficiency {100 * summary['cpu_efficiency']:.1f} % (samples per CPU-second: 1 rank "
          f"{cpu1:,.0f}, {k} ranks {cpuk:,.0f}; insensitive to how much CPU other work leaves us)")
    def against(ref):
        """The K-rank phases against the `ref` phases: medians and per-repeat ratios, into summary."""
        speeds, vs = speed(ref), pair_ratios("all", ref, 1)
        summary.update({f"samples_per_s_{ref}": speeds, f"median_{ref}": statistics.median(speeds),
                        f"efficiency_vs_{ref}": medk / statistics.median(speeds),
                        f"pair_vs_{ref}_median": statistics.median(vs), f"pair_vs_{ref}_range": [min(vs), max(vs)]})
        return (f"the runtime keeps {100 * summary[f'efficiency_vs_{ref}']:.1f} % of it (per-repeat median "
                f"{100 * statistics.median(vs):.1f} %, range {100 * min(vs):.1f}-{100 * max(vs):.1f} %)")

    if args.independent:
        kept = against("independent")
        print(f"{k} independent ranks (same job, no communication): median {summary['median_independent']:,.0f} "
              f"samples/s; {kept}")
    references = (("lockstep", args.lockstep, "ranks in lockstep (a barrier per step, no gradients exchanged)",
                   ": any synchronous step gets at most that here"),
                  ("floor", args.floor, "ranks averaging by hand (one mpi4py Allreduce of the flat gradients per step)", ""))
    for ref, wanted, what, remark in references:
        if not wanted:
            continue
        kept = against(ref)
        line = f"{k} {what}: median {summary[f'median_{ref}']:,.0f} samples/s{remark}"
        if args.independent:
            vs_independent = pair_ratios(ref, "independent", 1)
            summary[f"pair_{ref}_vs_independent_median"] = statistics.median(vs_independent)
            line += f" ({100 * statistics.median(vs_independent):.1f} % of independent ranks, per-repeat median)"
        print(f"{line}; {kept}")
    clean_rows = [r for r in rows if r["other_share"] <= args.clean]
    clean = _efficiencies(clean_rows, k)
    summary["clean_threshold"] = args.clean
    summary["clean"] = clean
    summary["other_share"] = [r["other_share"] for r in rows]
    clean_pairs = pair_ratios("all", "solo", k, only_clean=True)
    summary["clean_pair_efficiencies"] = clean_pairs
    if clean_pairs:
        summary["clean_pair_efficiency_median"] = statistics.median(clean_pairs)
        print(f"repeats whose 1-rank and {k}-rank phases both ran clean: {len(clean_pairs)}; median scaling "
              f"efficiency {100 * statistics.median(clean_pairs):.1f} % (range {100 * min(clean_pairs):.0f}-"
              f"{100 * max(clean_pairs):.0f} %)")
    if args.independent:
        clean_vs = pair_ratios("all", "independent", 1, only_clean=True)
        summary["clean_pair_vs_independent"] = clean_vs
        if clean_vs:
            print(f"repeats whose independent and {k}-rank phases both ran clean: {len(clean_vs)}; median "
                  f"{100 * statistics.median(clean_vs):.1f} % of independent ranks (range "
                  f"{100 * min(clean_vs):.0f}-{100 * max(clean_vs):.0f} %)")
    if clean:
        print(f"phases where other processes used at most {100 * args.clean:.0f} % of the CPUs: "
              f"{clean['phases_1']} x 1 rank, median {clean['median_1']:,.0f} samples/s; "
              f"{clean[f'phases_{k}']} x {k} ranks, median {clean[f'median_{k}']:,.0f} samples/s; "
              f"scaling efficiency {100 * clean['efficiency']:.1f} %")
    else:
        print(f"no phase of each kind ran with other processes under {100 * args.clean:.0f} % of the CPUs")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(summary, fh, indent=1)
    return 0


def run_once(ranks: int, args: argparse.Namespace, no_comm: bool = False, lockstep: bool = False) -> dict:
    mpiexec = shutil.which("mpiexec")
    if mpiexec is None:
        raise SystemExit("bench_scaling: mpiexec not found (pip install mpich mpi4py)")
    fd, out = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    cmd = [mpiexec, "-n", str(ranks), sys.executable, os.path.abspath(__file__), "--worker", out,
           "--batch-size", str(args.batch_size), "--steps", str(args.steps), "--warmup", str(args.warmup)] + (["--no-comm"] if no_comm else []) \
        + (["--no-comm", "--lockstep-worker"] if lockstep else []) \
        + (["--gradient-as-bucket-view"] if args.gradient_as_bucket_view else []) \
        + (["--horovod"] if args.horovod else [])
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, env=env)
        if proc.returncode != 0:
            raise SystemExit(f"bench_scaling: {' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
        with open(out) as fh:
            return json.load(fh)
    except subprocess.TimeoutExpired:
        raise SystemExit(f"bench_scaling: {' '.join(cmd)} did not finish within {args.timeout} s") from None
    finally:
        os.unlink(out)


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    import torch

    return f"{os.cpu_count()} CPUs ({cpu}), Python {platform.python_version()}, torch {torch.__version__}"


def driver(args: argparse.Namespace) -> int:
    k = args.ranks
    results = {1: [], k: []}
    independent, lockstep = [], []
    for rep in range(args.repeats):
        order = [1, k] if rep % 2 == 0 else [k, 1]
        if args.independent:
            order.insert(1, "independent")
        if args.lockstep:
            order.insert(1, "lockstep")
        for n in order:
            busy = wait_quiet(args) if args.max_busy < 1.0 else float("nan")
            if n in ("independent", "lockstep"):
                r = run_once(k, args, no_comm=True, lockstep=n == "lockstep")
                (independent if n == "independent" else lockstep).append(r)
                what = ("independent ranks (no communication)" if n == "independent"
                        else "ranks in lockstep (a barrier after every step, no gradients exchanged)")
                print(f"repeat {rep + 1}/{args.repeats}: {k} {what}: "
                      f"{r['samples_per_s']:9.0f} samples/s ({r['step_ms']:.2f} ms/step)", flush=True)
                continue
            r = run_once(n, args)
            r["busy_before"] = busy
            results[n].append(r)
            print(f"repeat {rep + 1}/{args.repeats}: {n} rank(s): {r['samples_per_s']:9.0f} samples/s "
                  f"({r['step_ms']:.2f} ms/step; before it the CPUs were {100 * busy:.0f} % busy with "
                  f"other work; load average {r['loadavg']:.1f})", flush=True)
    one = [r["samples_per_s"] for r in results[1]]
    many = [r["samples_per_s"] for r in results[k]]
    med1, medk = statistics.median(one), statistics.median(many)
    eff = medk / (k * med1)
    pairs = [m / (k * o) for o, m in zip(one, many)]
    summary = {
        "machine": machine(), "ranks": k, "batch_size": args.batch_size, "steps": args.steps,
        "repeats": args.repeats, "max_busy": args.max_busy,
        "busy_before": {n: [r["busy_before"] for r in results[n]] for n in results},
        "samples_per_s_1": one, f"samples_per_s_{k}": many,
        "median_1": med1, f"median_{k}": medk, "efficiency": eff,
        "pair_efficiency_median": statistics.median(pairs),
        "pair_efficiency_range": [min(pairs), max(pairs)],
    }
    if independent:
        ind = [r["samples_per_s"] for r in independent]
        summary["samples_per_s_independent"] = ind
        summary["median_independent"] = statistics.median(ind)
        summary["efficiency_vs_independent"] = medk / statistics.median(ind)
    if lockstep:
        ls = [r["samples_per_s"] for r in lockstep]
        summary["samples_per_s_lockstep"] = ls
        summary["median_lockstep"] = statistics.median(ls)
        summary["efficiency_vs_lockstep"] = medk / statistics.median(ls)
    print(f"\n1 rank: median {med1:,.0f} samples/s; {k} ranks: median {medk:,.0f} samples/s")
    if independent:
        print(f"{k} independent ranks (same load, no communication): median "
              f"{summary['median_independent']:,.0f} samples/s; the runtime keeps "
              f"{100 * summary['efficiency_vs_independent']:.1f} % of that")
    if lockstep:
        print(f"{k} ranks in lockstep (a barrier per step, no gradients exchanged): median "
              f"{summary['median_lockstep']:,.0f} samples/s: any synchronous step gets at most that here"
              + (f" ({100 * summary['median_lockstep'] / summary['median_independent']:.1f} % of independent ranks)"
                 if independent else "")
              + f"; the runtime keeps {100 * summary['efficiency_vs_lockstep']:.1f} % of it")
    print(f"scaling efficiency {100 * eff:.1f} % (per-pair median {100 * summary['pair_efficiency_median']:.1f} %, "
          f"range {100 * min(pairs):.1f}-{100 * max(pairs):.1f} %)")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(summary, fh, indent=1)
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=int, default=2, help="ranks to compare against 1 (default 2)")
    p.add_argument("--batch-size", type=int, default=64, help="per-rank batch (default 64)")
    p.add_argument("--steps", type=int, default=600, help="timed steps per job (default 600)")
    p.add_argument("--warmup", type=int, default=50, help="untimed steps first (default 50)")
    p.add_argument("--repeats", type=int, default=5, help="jobs per configuration (default 5)")
    p.add_argument("--timeout", type=float, default=300, help="seconds per job before giving up")
    p.add_argument("--max-busy", type=float, default=1.0,
                   help="before each job wait until other work keeps at most this fraction of the CPUs "
                        "busy (e.g. 0.1 on a shared machine; default 1.0: do not wait)")
    p.add_argument("--max-wait", type=float, default=120, help="longest wait for --max-busy, seconds")
    p.add_argument("--json", default=None, help="write the summary here")
    p.add_argument("--independent", action="store_true",
                   help="also time K ranks training independently (no communication): what the machine "
                        "itself allows K processes, to tell the runtime's cost from contention (jobs mode: "
                        "separate jobs; phases mode: phases of the same job, each next to a K-rank phase)")
    p.add_argument("--lockstep", action="store_true",
                   help="also time K ranks that pass a barrier after every step but exchange no "
                        "gradients: the ceiling of any synchronous data-parallel step on this machine "
                        "(each rank's jitter becomes everyone's wait), to tell the reduction's cost from it")
    p.add_argument("--floor", action="store_true",
                   help="phases mode: also time K ranks that average their gradients by hand, one "
                        "mpi4py Allreduce of the flat gradients per step (no hooks, no checks): the "
                        "least any synchronous data-parallel step exchanges, the runtime's yardstick")
    p.add_argument("--clean", type=float, default=0.05,
                   help="phases mode: also report phases during which other processes used at most this "
                        "share of the machine's CPUs (default 0.05)")
    p.add_argument("--mode", choices=("phases", "jobs"), default="phases",
                   help="phases (default): one K-rank job alternating 1-rank and K-rank phases; "
                        "jobs: separate mpiexec -n 1 and -n K jobs, alternating")
    p.add_argument("--gradient-as-bucket-view", action="store_true",
                   help="DistributedOptimizer(gradient_as_bucket_view=True) (gradients in shared memory)")
    p.add_argument("--horovod", action="store_true",
                   help="the distributed model uses Horovod's hvd.DistributedOptimizer (ddl_runtime's Horovod layer)")
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    p.add_argument("--phases-worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--no-comm", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--lockstep-worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.ranks < 2:
        p.error("--ranks must be at least 2")
    if args.horovod and args.gradient_as_bucket_view:
        p.error("--horovod and --gradient-as-bucket-view: Horovod's DistributedOptimizer has no such option")
    if args.worker:
        return phases_worker(args) if args.phases_worker else worker(args)
    return phases_driver(args) if args.mode == "phases" else driver(args)


if __name__ == "__main__":
    sys.exit(main())
