"""Staging an env to node-local storage: wml's staging step against the conda-pack recipe, at
1..N emulated nodes, and a staged ``import torch`` against the env where it was installed.

    python benchmarks/stage_bench.py PREFIX [--nodes 4] [--work DIR] [--places DIR] [--repeat 5]

* ``wml``: ``python -m wmlce_tools.stage job --site local --nodes N`` (the job script's step:
  ddlrun starts one rank per emulated node, every node unpacks the archive, checks and
  relocates its copy); the archive is built once before timing.
* ``tar``: N plain ``tar -xf`` of the same uncompressed archive at once, nothing else: the floor
  the hardware sets (wml's step minus this is wml's own cost).
* ``recipe``: OLCF's conda-pack recipe on the same env: every node runs ``tar -xzf`` of the
  conda-pack tar.gz and ``conda-unpack`` (N at once).
* ``import torch``: best of ``--repeat`` fresh interpreters, from the staged copy and from the
  env where it was installed (both on this machine's disk: the local install).

Emulated nodes share this host's cores and disk, so N nodes do N times the work on the same
hardware; on a real machine each node unpacks on its own.  Every step writes into fresh
directories after a ``sync`` (all are removed at the end): on this machine a tree still being
written back or deleted slows the next step by seconds.  ``--places DIR`` puts the node-local
places (and the recipe's) under DIR, e.g. ``/dev/shm/x`` (tmpfs: Perlmutter's ``/tmp`` is in
memory), which takes this machine's one virtual disk out of the per-node comparison.
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


def at_once(work: Path, what: str, nodes: int, step) -> float:
    """N nodes at once, each running ``step(dest)`` (a shell command) into a fresh directory (a
    tree still being deleted slows the disk down for seconds); the trees are removed after."""
    dests = [work / f"{what}{nodes}-{i}" for i in range(nodes)]
    for d in dests:
        d.mkdir()
    t = timed(["bash", "-c", " & ".join(f"({step(d)})" for d in dests) + " & wait"])
    for d in dests:
        if not (d / "bin").is_dir():
            raise SystemExit(f"{what} failed in {d}")
        shutil.rmtree(d)
    return t


def recipe(tgz: Path, work: Path, nodes: int) -> float:
    """The conda-pack recipe: untar the tar.gz, run conda-unpack."""
    return at_once(work, "recipe", nodes, lambda d: f"tar -xzf {tgz} -C {d} && {d}/bin/python {d}/bin/conda-unpack")


def plain_tar(tar: Path, work: Path, nodes: int) -> float:
    return at_once(work, "tar", nodes, lambda d: f"tar -xf {tar} -C {d}")


def import_torch(python: str, repeat: int, env: dict) -> float:
    return min(timed([python, "-c", "import torch"], env=env) for _ in range(repeat))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("prefix", type=Path)
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--work", type=Path, default=None)
    ap.add_argument("--places", type=Path, default=None, help="node-local places under this directory "
                    "(default: in --work)")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    prefix = args.prefix.absolute()
    work = Path(tempfile.mkdtemp(prefix="wml-stage-bench-", dir=args.work))
    if args.places:
        args.places.mkdir(parents=True, exist_ok=True)
    nl = Path(tempfile.mkdtemp(prefix="wml-stage-places-", dir=args.places)) if args.places else work
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
        print(f"# node-local places under {nl}")
        print(f"{'nodes':>5} {'wml s':>7} {'recipe s':>9} {'tar s':>7} {'wml/recipe':>11} {'wml/wml@1':>10}")
        first = None
        for n in range(1, args.nodes + 1):
            place = nl / f"place{n}"
            t_wml = timed([sys.executable, "-m", "wmlce_tools.stage", "job", "--env", str(prefix), "--place",
                           f"{place}/{{node}}", "--site", "local", "--nodes", str(n), "--job", f"bench{n}"],
                          env=env, stdout=subprocess.DEVNULL)
            if n == 1:
                staged = next(place.glob("node0/wml-env-*"))
            else:
                shutil.rmtree(place)
            first = first or t_wml
            t_recipe = recipe(tgz, nl, n)
            t_tar = plain_tar(a.path, nl, n)
            print(f"{n:5d} {t_wml:7.2f} {t_recipe:9.2f} {t_tar:7.2f} {t_wml / t_recipe:11.2f} {t_wml / first:10.2f}",
                  flush=True)
        local = import_torch(str(prefix / "bin" / "python"), args.repeat, env)
        stag = import_torch(str(staged / "bin" / "python"), args.repeat, env)
        print(f"import torch, best of {args.repeat}: local install {local:.2f} s, staged copy {stag:.2f} s "
              f"(staged/local {stag / local:.2f})")
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if nl != work:
            shutil.rmtree(nl, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
