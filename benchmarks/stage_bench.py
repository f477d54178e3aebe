"""Staging an env to node-local storage: wml's staging step against the conda-pack recipe, at
1..N emulated nodes, and a staged ``import torch`` against the env where it was installed.

    python benchmarks/stage_bench.py PREFIX [--nodes 4] [--work DIR] [--repeat 5]

* ``wml``: ``python -m wmlce_tools.stage job --site local --nodes N`` (the job script's step:
  ddlrun starts one rank per emulated node, rank 0 reads the archive and broadcasts it, every
  node unpacks, checks and relocates its copy); the archive is built once before timing.
* ``recipe``: OLCF's conda-pack recipe on the same env: every node runs ``tar -xzf`` of the
  conda-pack tar.gz and ``conda-unpack`` (N at once).
* ``import torch``: best of ``--repeat`` fresh interpreters, from the staged copy and from the
  env where it was installed (both on this machine's disk: the local install).

Emulated nodes share this host's cores and disk, so N nodes do N times the work on the same
hardware; on a real machine each node unpacks on its own.  Every step writes into fresh
directories after a ``sync`` (all are removed at the end): on this machine a tree still being
written back or deleted slows the next step by seconds.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def timed(cmd, **kw) -> float:
    subprocess.run(["sync"], check=True)   # nothing of the step before still being written back
    time.sleep(2)
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, **kw)
    return time.perf_counter() - t0


def recipe(tgz: Path, work: Path, nodes: int) -> float:
    """N nodes at once: untar the conda-pack archive, run conda-unpack (fresh directories: a tree
    still being deleted slows the disk down for seconds)."""
    dests = [work / f"recipe{nodes}-{i}" for i in range(nodes)]
    for d in dests:
        d.mkdir()
    script = " & ".join(f"(tar -xzf {tgz} -C {d} && {d}/bin/python {d}/bin/conda-unpack)" for d in dests) + " & wait"
    t = timed(["bash", "-c", script])
    for d in dests:
        if not (d / "bin").is_dir():
            raise SystemExit(f"recipe failed in {d}")
    return t


def import_torch(python: str, repeat: int, env: dict) -> float:
    return min(timed([python, "-c", "import torch"], env=env) for _ in range(repeat))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("prefix", type=Path)
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--work", type=Path, default=None)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    prefix = args.prefix.absolute()
    work = Path(tempfile.mkdtemp(prefix="wml-stage-bench-", dir=args.work))
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    env.pop("CONDA_PREFIX", None)
    try:
        from wmlce_tools.stage.archive import ensure_archive

        t0 = time.perf_counter()
        a = ensure_archive(prefix)
        print(f"# {prefix}: archive {a.path.stat().st_size / 2**20:.0f} MiB, {len(a.manifest.entries)} entries, "
              f"built in {time.perf_counter() - t0:.1f} s (once per env)")
        import conda_pack

        tgz = work / "env.tar.gz"
        t0 = time.perf_counter()
        conda_pack.pack(prefix=str(prefix), output=str(tgz), n_threads=os.cpu_count() or 1, force=True)
        print(f"# conda-pack tar.gz {tgz.stat().st_size / 2**20:.0f} MiB, built in {time.perf_counter() - t0:.1f} s")
        print(f"{'nodes':>5} {'wml s':>7} {'recipe s':>9} {'wml/recipe':>11}")
        for n in range(1, args.nodes + 1):
            place = work / f"place{n}"
            t_wml = timed([sys.executable, "-m", "wmlce_tools.stage", "job", "--env", str(prefix), "--place",
                           f"{place}/{{node}}", "--site", "local", "--nodes", str(n), "--job", f"bench{n}"],
                          env=env, stdout=subprocess.DEVNULL)
            if n == 1:
                staged = next(place.glob("node0/wml-env-*"))
            t_recipe = recipe(tgz, work, n)
            print(f"{n:5d} {t_wml:7.1f} {t_recipe:9.1f} {t_wml / t_recipe:11.2f}", flush=True)
        local = import_torch(str(prefix / "bin" / "python"), args.repeat, env)
        stag = import_torch(str(staged / "bin" / "python"), args.repeat, env)
        print(f"import torch, best of {args.repeat}: local install {local:.2f} s, staged copy {stag:.2f} s "
              f"(staged/local {stag / local:.2f})")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
