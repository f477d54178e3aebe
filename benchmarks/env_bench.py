"""Benchmark ``wml env lock`` / ``create`` on the offline fixture channel of tests/env.

    python benchmarks/env_bench.py [--repeat N]

Prints a markdown table: in-process times (median of N, after the libraries are imported)
and the wall time of the whole CLI in a fresh process (imports included).
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "env"))

from local_channel import build_channel  # noqa: E402

SPEC = """\
name: bench
channels: [{channel}]
platforms: [linux-64, linux-ppc64le]
virtual_packages: {{__glibc: "2.28"}}
packages:
  - wml-greet
  - wml-pyutil
  - python
imports: [wml_conda_owned, wml_pyutil]
"""


def timed(fn, repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="wml-env-bench-"))
    try:
        channel = build_channel(work / "channel")
        spec_path = work / "bench.yaml"
        spec_path.write_text(SPEC.format(channel=channel.as_uri()))
        os.environ["WML_PKGS_DIR"] = str(work / "pkgs")

        t = time.perf_counter()
        import conda_lock.lockfile  # noqa: F401
        import rattler  # noqa: F401
        import_s = time.perf_counter() - t

        from wmlce_tools.env.create import create_env
        from wmlce_tools.env.lock import lock, locked_env
        from wmlce_tools.env.spec import load_spec

        spec = load_spec(spec_path)
        lockfile = work / "conda-lock.yml"
        rows = []

        first = timed(lambda: lock(spec, lockfile, force=True), 1)[0]
        rows.append(("lock, both platforms, first solve in process", first))
        solve = timed(lambda: lock(spec, lockfile, force=True), args.repeat)
        rows.append(("lock, both platforms, re-solve (--force)", statistics.median(solve)))
        same = timed(lambda: lock(spec, lockfile), args.repeat)
        rows.append(("lock, both platforms, unchanged spec (hash match, no solve)", statistics.median(same)))

        n = [0]

        def create(platform: str) -> None:
            n[0] += 1
            create_env(locked_env(lockfile, platform), work / "envs" / f"{platform}-{n[0]}")

        for platform in ("linux-64", "linux-ppc64le"):
            shutil.rmtree(work / "pkgs", ignore_errors=True)
            cold = timed(lambda: create(platform), 1)[0]
            rows.append((f"create {platform}, empty package cache", cold))
            warm = timed(lambda: create(platform), args.repeat)
            rows.append((f"create {platform}, warm package cache", statistics.median(warm)))

        env = dict(os.environ, WML_ENVS_DIR=str(work / "cli-envs"))
        cli = [sys.executable, "-m", "wmlce_tools.env.cli", "env"]

        def run(*a: str) -> None:
            subprocess.run([*cli, *a], check=True, capture_output=True, env=env)

        cli_lock = timed(lambda: run("lock", str(spec_path), "-f", str(work / "cli-lock.yml"), "--force"),
                         args.repeat)
        rows.append(("CLI `wml env lock` (fresh process, imports included)", statistics.median(cli_lock)))
        k = [0]

        def cli_create() -> None:
            k[0] += 1
            run("create", str(lockfile), "--prefix", str(work / "cli" / f"e{k[0]}"), "--no-progress")

        cli_c = timed(cli_create, args.repeat)
        rows.append(("CLI `wml env create` linux-64 (fresh process)", statistics.median(cli_c)))

        print(f"import conda_lock.lockfile + rattler: {import_s:.3f} s (once per process)\n")
        print("| operation | seconds |")
        print("|---|---|")
        for name, secs in rows:
            print(f"| {name} | {secs:.3f} |")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
