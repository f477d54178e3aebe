"""Helpers shared by the chain tests under the schedulers' doubles (test_chain_pbs.py,
test_chain_lsf_cobalt.py): submit tests/chain/programs/resumable.py as a chain, read its segments,
and the result of the same run done in one job."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import List, Tuple

PROGRAM = Path(__file__).resolve().parents[1] / "chain" / "programs" / "resumable.py"


def submit_chain(run_wml, env: dict, tmp: Path, site_args: List[str], steps: int, per_walltime: int,
                 chain: int = 3) -> Tuple[dict, Path]:
    """``wml submit ... --chain N --json resumable.py``; returns wml's JSON and the result file."""
    result = tmp / "result.json"
    proc = run_wml("submit", *site_args, "--chain", str(chain), "--json", str(PROGRAM), "--steps", str(steps),
                   "--steps-per-walltime", str(per_walltime), "--result", str(result), env=env, timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(proc.stdout.splitlines()[-1]), result


def one_job_result(tmp: Path, steps: int) -> dict:
    """The result of the same run done in one job (no chain: no checkpoint directory)."""
    out = tmp / "one-job.json"
    subprocess.run([sys.executable, str(PROGRAM), "--steps", str(steps), "--result", str(out)], check=True,
                   timeout=60, capture_output=True)
    return json.loads(out.read_text())


def segment_files(info: dict, suffix: str) -> List[str]:
    """Each segment's output file ending in ``suffix`` (.out, .err, .output, .error), as text."""
    run = Path(info["run_dir"])
    return [next((run / f"segment-{k}").glob(f"*{suffix}")).read_text() for k in range(1, len(info["segments"]) + 1)]


def segment_ends(info: dict) -> List[int]:
    """The status each segment's program ended with (segment-<k>/end.json, what wml status reads)."""
    run = Path(info["run_dir"])
    return [json.loads((run / f"segment-{k}" / "end.json").read_text())["status"]
            for k in range(1, len(info["segments"]) + 1)]
