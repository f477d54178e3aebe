"""The one line per check of benchmarks/gpu_checks.sh.

A check script prints (on one rank) one line per check it made:

    from _checks import check
    check("hvd-bound 64 MB (host)", figure=f"{ratio:.2f}x ({ms:.1f} ms)", limit="<= 1.3x", ok=ratio <= 1.3)

    CHECK {"name": ..., "figure": ..., "limit": ..., "pass": true|false, ...detail}

gpu_checks.sh collects them (results.jsonl) and prints them as a table:

    python3 benchmarks/_checks.py table < results.jsonl    # exit 1 when any check failed
    python3 benchmarks/_checks.py missing NAME EXIT LIMIT_S # the line of a run that reported nothing
    python3 benchmarks/_checks.py suite NAME LOG [KNOWN]    # a pytest run's line: 0 failed, or only
                                                            # the failures listed in KNOWN (one id a line)
"""
import json
import sys

CPU_LIMIT = "none on CPU"  # the --cpu smoke run: figures are no GPU figures, only correctness counts


def check(name: str, figure: str, limit: str, ok: bool, **detail) -> None:
    print("CHECK " + json.dumps({"name": name, "figure": figure, "limit": limit, "pass": bool(ok), **detail}),
          flush=True)


def gpu_sharing() -> tuple:
    """(label, ok) for the name of a check run by ranks that share a GPU, asked from NVIDIA's MPS
    control daemon at this process's CUDA_MPS_PIPE_DIRECTORY (NVIDIA's default where unset) once
    this process has used CUDA: "MPS" where it lists a server (an MPS client connects at its CUDA
    initialisation, and the daemon starts a server for it), else "time-sliced".  ``ok`` is False
    where MPS was asked for (ddlrun --gpu-sharing mps sets the pipe directory) but no server serves:
    a figure that would pass for MPS while the GPU time-sliced."""
    import os
    import shutil
    import subprocess

    asked = bool(os.environ.get("CUDA_MPS_PIPE_DIRECTORY"))
    exe = shutil.which("nvidia-cuda-mps-control")
    servers = ""
    if exe is not None:
        try:
            p = subprocess.run([exe], input="get_server_list\n", capture_output=True, text=True, timeout=10)
            servers = p.stdout.strip() if p.returncode == 0 else ""
        except (OSError, subprocess.TimeoutExpired):
            servers = ""
    if servers:
        return "MPS", True
    return ("time-sliced, MPS asked but no MPS server" if asked else "time-sliced"), not asked


def line(row: dict) -> str:
    return f"{row['name']:<38} {row['figure']:<34} {row['limit']:<18} {'PASS' if row['pass'] else 'FAIL'}"


def suite(name: str, log: str, known: str = "") -> int:
    """One CHECK line for a pytest run (-rf: its FAILED lines): every rank's counts; with `known`,
    a failure counts against the limit only when it is not listed there (e.g. failing on CPU too)."""
    import re
    text = open(log, errors="replace").read()
    counts = re.findall(r"(\d+) failed|(\d+) passed", text)
    failed = [int(f) for f, _ in counts if f]
    passed = [int(p) for _, p in counts if p]
    ids = sorted({m.split(" - ")[0] for m in re.findall(r"^FAILED (\S+)", text, re.M)})
    allowed = set(open(known).read().split()) if known else set()
    new = [i for i in ids if i not in allowed]
    figure = (f"{max(passed, default=0)} passed, {max(failed, default=0)} failed"
              + (f" ({len(new)} not known)" if known else ""))
    ok = bool(passed) and (not new if known else not failed)
    check(name, figure, "only known failures" if known else "0 failed", ok, new_failures=new[:20])
    return 0


def main(argv) -> int:
    if argv[:1] == ["missing"]:
        name, code, limit = argv[1], int(argv[2]), argv[3]
        why = f"timed out after {limit} s" if code in (124, 137) else f"no result (exit {code})"
        print("CHECK " + json.dumps({"name": name, "figure": why, "limit": "-", "pass": False}))
        return 0
    if argv[:1] == ["suite"]:
        return suite(*argv[1:])
    if argv[:1] == ["table"]:
        rows = [json.loads(raw[len("CHECK "):] if raw.startswith("CHECK ") else raw)
                for raw in sys.stdin.read().splitlines() if raw.strip()]
        for row in rows:
            print(line(row))
        failed = sum(not row["pass"] for row in rows)
        if argv[1:] != ["--quiet-total"]:
            print(f"{len(rows)} checks, {failed} failed")
        return 1 if failed or not rows else 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
