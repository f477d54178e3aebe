#!/usr/bin/env python
"""Training-scaling benchmark: samples/s of train_digits.py's training step, 1 rank vs N ranks.

    python examples/bench_scaling.py                      # 1 vs 2 ranks, 5 interleaved repeats
    python examples/bench_scaling.py --ranks 2 --repeats 7 --batch-size 64 --steps 600

Each measurement is a fresh ``mpiexec -n K`` job running the example's own step (forward,
backward with the gradient reductions started from hooks, averaged SGD update) on the rank's
shard of the digits data, one torch thread per rank and the same per-rank batch for every K
(weak scaling).  After warm-up steps and a barrier, rank 0 times a fixed number of steps up to
a closing barrier.  1-rank and K-rank jobs alternate (1,K then K,1, ...) so that noise from
other work on the machine hits both alike; the report gives medians.

    scaling efficiency = median samples/s on K ranks / (K x median samples/s on 1 rank)
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
        opt = ddl.DistributedOptimizer(opt, named_parameters=model.named_parameters())
        ddl.broadcast_parameters(model.state_dict(), root_rank=0)

    for i in range(args.warmup):
        train_digits.train_step(model, opt, *batches[i % nb])
    if size > 1:
        ddl_runtime.barrier()
    t0 = time.perf_counter()
    for i in range(args.steps):
        train_digits.train_step(model, opt, *batches[i % nb])
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


def run_once(ranks: int, args: argparse.Namespace, no_comm: bool = False) -> dict:
    mpiexec = shutil.which("mpiexec")
    if mpiexec is None:
        raise SystemExit("bench_scaling: mpiexec not found (pip install mpich mpi4py)")
    fd, out = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    prefix = ["nice", "-n", str(-args.priority)] if args.priority else []
    cmd = prefix + [mpiexec, "-n", str(ranks), sys.executable, os.path.abspath(__file__), "--worker", out,
           "--batch-size", str(args.batch_size), "--steps", str(args.steps), "--warmup", str(args.warmup)] + (["--no-comm"] if no_comm else [])
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
    independent = []
    for rep in range(args.repeats):
        order = [1, k] if rep % 2 == 0 else [k, 1]
        if args.independent:
            order.insert(1, -k)
        for n in order:
            busy = wait_quiet(args) if args.max_busy < 1.0 else float("nan")
            r = run_once(abs(n), args, no_comm=n < 0)
            r["busy_before"] = busy
            if n < 0:
                independent.append(r)
                print(f"repeat {rep + 1}/{args.repeats}: {k} independent ranks (no communication): "
                      f"{r['samples_per_s']:9.0f} samples/s ({r['step_ms']:.2f} ms/step)", flush=True)
                continue
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
        "repeats": args.repeats, "max_busy": args.max_busy, "priority": args.priority,
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
    print(f"\n1 rank: median {med1:,.0f} samples/s; {k} ranks: median {medk:,.0f} samples/s")
    if independent:
        print(f"{k} independent ranks (same load, no communication): median "
              f"{summary['median_independent']:,.0f} samples/s; the runtime keeps "
              f"{100 * summary['efficiency_vs_independent']:.1f} % of that")
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
    p.add_argument("--priority", type=int, default=0,
                   help="run the jobs at nice -N (root only): on a shared machine this approximates "
                        "dedicated cores; the report says so (default 0: normal priority)")
    p.add_argument("--json", default=None, help="write the summary here")
    p.add_argument("--independent", action="store_true",
                   help="also time K ranks training independently (no communication): what the machine "
                        "itself allows K processes, to tell the runtime's cost from contention")
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    p.add_argument("--no-comm", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.ranks < 2:
        p.error("--ranks must be at least 2")
    if args.worker:
        return worker(args)
    return driver(args)


if __name__ == "__main__":
    sys.exit(main())
