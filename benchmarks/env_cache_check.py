"""What the package-cache check of ``wml env create`` costs on a real-sized env.

    python benchmarks/env_cache_check.py [--packages 300] [--repeat 3]

Builds, offline, a local channel of ``--packages`` real ``.tar.bz2`` conda packages (the
archive format of tests/env/local_channel.py): each has 24 small files (2-16 KiB) and one of
256 KiB, so 300 packages are 7,500 files and ~133 MB -- the package count of a WML CE
pytorch env, fewer bytes (its CUDA libraries alone are GBs; the check's cost grows with the
bytes hashed, so the MB/s column is what scales).  Locks one spec asking for all of them,
creates the env once to fill the package cache, then times ``create_env`` (in process,
libraries already imported) with ``WML_CACHE_CHECK`` = skip / fast / full and ``--link``
hardlink / copy, median of ``--repeat``, the modes interleaved so load drifts hit all alike.
Prints a markdown table and the load average before and after.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "env"))
sys.path.insert(0, str(ROOT))

from local_channel import FileSpec, PackageSpec, build_package, write_repodata  # noqa: E402

SMALL_FILES, SMALL_SIZES, BIG = 24, (2048, 4096, 8192, 16384), 256 * 1024


def _data(tag: str, size: int) -> bytes:
    unit = f"{tag} wml cache-check benchmark data\n".encode()
    return (unit * (size // len(unit) + 1))[:size]


def build_bench_channel(channel: Path, n: int) -> tuple[int, int]:
    """``n`` noarch packages bench-pkg-NNN; returns (files, bytes)."""
    (channel / "noarch").mkdir(parents=True, exist_ok=True)
    (channel / "linux-64").mkdir(parents=True, exist_ok=True)
    files = size = 0
    for k in range(n):
        name = f"bench-pkg-{k:03d}"
        specs = [FileSpec(f"share/{name}/f{i:02d}.txt", _data(f"{name}/{i}", SMALL_SIZES[i % 4]))
                 for i in range(SMALL_FILES)]
        specs.append(FileSpec(f"lib/{name}/data.bin", _data(f"{name}/big", BIG)))
        build_package(PackageSpec(name, "1.0", "0", "noarch", noarch="generic", files=specs), channel,
                      compresslevel=1)
        files += len(specs)
        size += sum(len(f.data) for f in specs)
    write_repodata(channel)
    return files, size


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--packages", type=int, default=300)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    load_before = os.getloadavg()
    work = Path(tempfile.mkdtemp(prefix="wml-cache-bench-"))
    try:
        t = time.perf_counter()
        nfiles, nbytes = build_bench_channel(work / "channel", args.packages)
        build_s = time.perf_counter() - t
        spec_path = work / "bench.yaml"
        spec_path.write_text("name: cache-bench\nchannels: [" + (work / "channel").as_uri() + "]\n"
                             "platforms: [linux-64]\npackages:\n"
                             + "".join(f"  - bench-pkg-{k:03d}\n" for k in range(args.packages)))
        os.environ["WML_PKGS_DIR"] = str(work / "pkgs")

        from wmlce_tools.env.create import create_env
        from wmlce_tools.env.linking import LinkPolicy
        from wmlce_tools.env.lock import lock, locked_env
        from wmlce_tools.env.spec import load_spec

        lockfile = work / "conda-lock.yml"
        lock(load_spec(spec_path), lockfile, force=True)
        locked = locked_env(lockfile, "linux-64")
        n = [0]

        def create(check: str, link: LinkPolicy) -> float:
            os.environ["WML_CACHE_CHECK"] = check
            n[0] += 1
            target = work / "envs" / f"e{n[0]}"
            t0 = time.perf_counter()
            create_env(locked, target, link=link)
            secs = time.perf_counter() - t0
            shutil.rmtree(target)
            return secs

        cold = create("full", LinkPolicy.hardlink)
        cases = [(c, l) for l in (LinkPolicy.hardlink, LinkPolicy.copy) for c in ("skip", "fast", "full")]
        times: dict = {c: [] for c in cases}
        for _ in range(args.repeat):
            for case in cases:
                times[case].append(create(*case))
        load_after = os.getloadavg()

        print(f"{args.packages} packages, {nfiles} files, {nbytes / 1e6:.0f} MB; channel built in {build_s:.1f} s; "
              f"load average {load_before[0]:.1f} before, {load_after[0]:.1f} after; {os.cpu_count()} CPUs\n")
        print(f"create with an empty package cache (download + extract + full check + hard links): {cold:.2f} s\n")
        print("| WML_CACHE_CHECK | --link | create, warm cache (s, median) | check cost vs skip (s) | check MB/s |")
        print("|---|---|---|---|---|")
        for link in (LinkPolicy.hardlink, LinkPolicy.copy):
            base = statistics.median(times[("skip", link)])
            for check in ("skip", "fast", "full"):
                med = statistics.median(times[(check, link)])
                extra = med - base
                rate = f"{nbytes / 1e6 / extra:.0f}" if check == "full" and extra > 0 else ""
                print(f"| {check} | {link.value} | {med:.2f} | {extra:+.2f} | {rate} |")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
