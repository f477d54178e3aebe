"""Which archive format unpacks an environment fastest on a node (issue 31).

    python benchmarks/stage_formats.py PREFIX [--work DIR] [--repeat N]

For each format: the archive's size, the time to build it (once, on the submit host) and the
time to unpack it into an empty directory (per node, at every job start), best of N.  The
conda-pack recipe (``tar.gz`` built by conda-pack's own gzip, then ``tar -xzf``) is the
baseline.  squashfs is timed twice: extracting it (``unsquashfs``) and mounting it
(``squashfuse``, where FUSE works), which is instant but leaves every read to FUSE.
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


def _run(cmd: str) -> float:
    t0 = time.perf_counter()
    subprocess.run(["bash", "-o", "pipefail", "-c", cmd], check=True)
    return time.perf_counter() - t0


def _drop(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


FORMATS = {
    # name: (build command, unpack command); {src} parent, {name} dir name, {a} archive, {d} dest
    "tar": ("tar -C {src} -cf {a} {name}", "tar -xf {a} -C {d}"),
    "tar.zst (zstd -T0 -3)": ("tar -C {src} -cf - {name} | zstd -q -T0 -3 -o {a}",
                              "zstd -q -dc {a} | tar -xf - -C {d}"),
    "tar.zst (pzstd -3)": ("tar -C {src} -cf - {name} | pzstd -q -3 -p {threads} -o {a}",
                           "pzstd -q -dc -p {threads} {a} | tar -xf - -C {d}"),
    "tar.gz (gzip -1)": ("tar -C {src} -cf - {name} | gzip -1 > {a}", "tar -xzf {a} -C {d}"),
    "squashfs (zstd), unsquashfs": ("mksquashfs {src}/{name} {a} -comp zstd -quiet -no-progress -processors {threads}",
                                    "unsquashfs -q -n -p {threads} -d {d}/{name} {a} >/dev/null"),
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("prefix", type=Path)
    ap.add_argument("--work", type=Path, default=None)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--conda-pack", action="store_true", help="also time conda-pack's tar.gz (conda envs only)")
    args = ap.parse_args()
    prefix = args.prefix.absolute()
    work = Path(tempfile.mkdtemp(prefix="wml-stage-bench-", dir=args.work))
    threads = os.cpu_count() or 1
    nfiles = sum(len(f) + len(d) for _, d, f in os.walk(prefix))
    size = sum(e.stat(follow_symlinks=False).st_size for e in _walk(prefix))
    print(f"# {prefix}: {nfiles} entries, {size / 2**20:.0f} MiB; {threads} cores; best of {args.repeat}")
    print(f"{'format':34} {'MiB':>7} {'build s':>8} {'unpack s':>9}")
    fmts = dict(FORMATS)
    if args.conda_pack:
        fmts["conda-pack tar.gz + tar -xzf"] = (None, "tar -xzf {a} -C {d}")
    results = {}
    try:
        for name, (build, unpack) in fmts.items():
            a = work / "archive"
            kw = dict(src=prefix.parent, name=prefix.name, a=a, threads=threads)
            if build is None:
                import conda_pack

                t0 = time.perf_counter()
                conda_pack.pack(prefix=str(prefix), output=str(a) + ".tar.gz", format="tar.gz",
                                n_threads=1, force=True)
                tb = time.perf_counter() - t0
                os.replace(str(a) + ".tar.gz", a)
            else:
                tb = _run(build.format(**kw))
            best = float("inf")
            for _ in range(args.repeat):
                d = work / "dest"
                _drop(d)
                d.mkdir()
                best = min(best, _run(unpack.format(d=d, **kw)))
            _drop(work / "dest")
            results[name] = best
            print(f"{name:34} {a.stat().st_size / 2**20:7.0f} {tb:8.1f} {best:9.2f}", flush=True)
            a.unlink()
    finally:
        _drop(work)
    return 0


def _walk(root: Path):
    for dirpath, dirs, files in os.walk(root):
        for n in dirs + files:
            yield Path(dirpath, n)


if __name__ == "__main__":
    sys.exit(main())
