"""A torch training run with ddl_runtime.torch's Checkpointer (tests/checkpoint/programs/torch_chain.py:
the documented lines, deterministic data order, dropout and per-rank random streams, SGD with
momentum) that needs three walltimes, through ``wml submit --chain 3`` on the local site, equal bit
for bit to one job.

The segment's walltime is 4 s and the margin 3 s, so the job script's own timer sends SIGUSR1 one
second in: while ddlrun, the rank shims and the ranks are still starting (torch takes longer than that
to import).  Such an early signal must not kill a rank (SIGUSR1's default action): the rank shim starts
the program with it ignored and repeats it until the program ends, so the runtime's handler takes it
once installed.  The program (``--wait-for-stop-after 0``) starts each segment's first step only once the
signal has reached its rank, as if that step took the rest of the walltime: without that, whether the
repeated signal lands before or after a fast step is a matter of the machine's speed.  So each segment
stops, agreed, after one step; the third reaches the last step, which (``Checkpointer(steps=...)``)
finishes the run and exits 0 although a stop was asked for.  The rank shim still repeats the signal
while the ranks exit: it must not kill them (it did, with status 138, when the program ended before
ever taking it).  Real: wml, the job scripts and their timer, ddlrun, MPICH's mpiexec, rankexec, torch."""
from __future__ import annotations

import json
import re
from pathlib import Path

from checkpoint.test_torch_chain import PROGRAM, _final, _finish, _start


def one_job_final(tmp_path: Path, steps: int) -> str:
    code, out, err = _finish(_start(tmp_path / "one-job", "--steps", str(steps), "--step-seconds", "0"))
    assert code == 0, err[-2000:]
    return _final(out)


def test_a_signal_at_start_stops_each_segment_after_one_agreed_step(run_wml, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    # the signal 1 s into each segment; the walltime (which the local site enforces) well after it
    proc = run_wml("submit", "--chain", "3", "-t", "60s", "--signal-margin", "59s", "--ranks-per-node", "2",
                   "-J", "torch", "--json", "python", str(PROGRAM), str(out), "--steps", "3", "--step-seconds", "0",
                   "--wait-for-stop-after", "0", timeout=240)
    text = proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and proc.returncode == 0, text[-4000:]
    assert "exit status 138" not in text and "failed" not in text, text[-4000:]
    assert text.count("wml: SIGUSR1 (this script's timer: the walltime is near)") == 3, text[-4000:]
    assert re.findall(r"stop agreed at step (\d+)", text) == ["0", "1"], text[-4000:]   # one step each
    assert "finished in segment 3 of 3" in text, text[-4000:]
    finals = re.findall(r"FINAL ([0-9a-f]{64})", text)
    assert finals == [one_job_final(tmp_path, 3)], text[-4000:]
    # wml report: the three segments, each with its ranks' records (the first two stopped for the walltime)
    run_id = json.loads(proc.stdout.splitlines()[-1])["run_id"]
    page = tmp_path / "chain.html"
    rep = run_wml("report", run_id, "--html", str(page), env={"COLUMNS": "250"})
    assert rep.returncode == 0 and "Traceback" not in rep.stderr, rep.stderr
    rows = [[c.strip() for c in ln.strip("│").split("│")] for ln in rep.stdout.splitlines() if re.match(r"│ [123]/3 ", ln)]
    assert [(r[1], r[2], r[-2], r[-1]) for r in rows] == [("STOPPED", "75", "0", "0"), ("STOPPED", "75", "1", "1"),
                                                          ("COMPLETED", "0", "2", "1")], rep.stdout   # reached, ckpt
    lines = [ln for ln in rep.stdout.splitlines() if re.match(r"segment [123]/3: ", ln) and "per rank" not in ln]
    assert len(lines) == 3, rep.stdout
    assert all("stopped for the walltime" in r for r in lines[:2]) and "stopped" not in lines[2], rep.stdout
    from helpers.page import drawn

    marks = drawn(page)
    assert marks["timeline"] >= 3 and marks["layout"] == 1, marks      # one step a segment: none to time
