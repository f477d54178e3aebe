"""``wml report`` of a sweep and of a chained run as they were (issue 59), for real on the local
site (wml sweep / wml submit --chain, ddlrun, pip's MPICH, ddl_runtime's records), in the
terminal and on the page opened in Debian's headless Chromium.

A sweep: every trial in a table, its parameters in ``wml sweep show``'s order (the grid's: lr
before bs, which a sort would swap), state, exit status, walltime and metrics; a best trial only
among the completed ones with the metric (a failed trial that printed the smallest loss is not
best; a sweep without a metric has none); its metric plotted against lr on a log axis labelled
at the decades.  A chain: each segment's step reached (the ranks' records) beside its last
checkpoint (latest.json), named as such, in the report, its timeline, ``wml jobs`` and
``wml status``."""
from __future__ import annotations

import json
import re
from pathlib import Path

from checkpoint.test_torch_chain import PROGRAM as CHAIN_PROGRAM
from helpers.page import _chromium, drawn

TRIAL = Path(__file__).parent / "programs" / "sweep_trial.py"


def _wml(run_wml, *args, timeout=300, **env):
    proc = run_wml(*args, timeout=timeout, env={"COLUMNS": "200", **env})
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def _flat(text: str) -> str:
    return " ".join(text.split())


def _table_rows(out: str, first: str) -> list:
    """The rich table's rows whose first cell is `first` (a number or a word), as lists of cells."""
    rows = []
    for line in out.splitlines():
        cells = [c.strip() for c in line.strip().strip("│┃").split("│" if "│" in line else "┃")]
        if cells and cells[0] == first:
            rows.append(cells)
    return rows


def _sweep(run_wml, tmp_path, *extra):
    proc = _wml(run_wml, "sweep", "--json", "--param", "lr=0.1,0.01,0.001", "--param", "bs=8",
                "python", str(TRIAL), "--lr", "{lr}", "--bs", "{bs}", *extra, timeout=400)
    assert proc.returncode == 1, proc.stderr[-3000:]        # one trial failed
    return json.loads(proc.stdout.splitlines()[-1])["run_id"]


def test_a_sweep_lists_every_trial_and_never_names_a_failed_one_best(run_wml, tmp_path):
    run_id = _sweep(run_wml, tmp_path, "--fail-at", "0.001")     # trial 2 prints the smallest loss, then fails
    page = tmp_path / "sweep.html"
    rep = _wml(run_wml, "report", run_id, "--html", str(page))
    assert rep.returncode == 0, rep.stderr
    out = rep.stdout
    first = _flat(out.split("\n┏", 1)[0])
    assert first.startswith(f"sweep {run_id} (3 trials, packed): python {TRIAL} --lr '{{lr}}' --bs '{{bs}}' "), first
    assert "on local, 1 node x 1 rank a trial, started " in first and "FAILED: " in first, first
    header = next(line for line in out.splitlines() if line.startswith("┃"))
    assert [c.strip() for c in header.strip("┃").split("┃")] == ["trial", "lr", "bs", "state", "exit", "walltime_s",
                                                                 "loss"], header
    trials = out.split("\nbest", 1)[0]          # the trials' table (the ranks' table follows)
    rows = {int(r[0]): r for n in "012" for r in _table_rows(trials, n)}
    assert [rows[i][3] for i in range(3)] == ["COMPLETED", "COMPLETED", "FAILED"] and rows[2][4] == "3", out
    assert [rows[i][1] for i in range(3)] == ["0.1", "0.01", "0.001"] and rows[2][6] == "0.001", out
    flat = _flat(out)
    assert "best by loss (smallest first, completed trials): trial 1 (0.01), trial 0 (0.1)" in flat, out
    assert "ranks of trial 1 (the best trial by loss)" in flat, out
    # the page: the same table, the verdict, the metric against lr on a log axis labelled at decades
    text = page.read_text()
    trials = text.split("<h2>Trials (3)</h2>", 1)[1].split("</table>", 1)[0]
    assert "<th>trial</th><th>lr</th><th>bs</th><th>state</th><th>exit</th><th>walltime_s</th><th>loss</th>" in trials
    assert trials.count("<tr>") == 4 and "<td>FAILED</td><td>3</td>" in trials
    assert "Best by loss (smallest first, completed trials): trial 1 (0.01), trial 0 (0.1)." in text
    dom = _chromium("--dump-dom", page.as_uri()).stdout
    sweep_plot = dom.split('data-section="sweep"', 1)[1].split('class="wml-plot"', 1)[0]
    ticks = re.findall(r'<g class="xtick">\s*<text[^>]*>([^<]*)</text>', sweep_plot)
    assert ticks and all(re.fullmatch(r"(0\.0*1|1|10*)", t) for t in ticks), ticks     # decades only
    assert {"0.001", "0.01", "0.1"} <= set(ticks), ticks
    marks = drawn(page)
    assert marks["sweep"] >= 3 and marks["timeline"] >= 3 and marks["layout"] == 1, marks


def test_a_sweep_without_a_metric_names_no_best_trial(run_wml, tmp_path):
    run_id = _sweep(run_wml, tmp_path, "--no-metric", "--fail-at", "0.001")   # the last trial fails
    page = tmp_path / "sweep.html"
    rep = _wml(run_wml, "report", run_id, "--html", str(page))
    assert rep.returncode == 0, rep.stderr
    flat = _flat(rep.stdout)
    assert "best: none: no trial printed a JSON object of numbers" in flat, rep.stdout
    assert "(the best trial" not in flat and "best trial" not in flat.replace("best trials", ""), rep.stdout
    assert ("ranks of trial 1 (the last completed trial with records; no completed trial printed a numeric "
            "metric)") in flat, rep.stdout
    rows = {int(r[0]): r for n in "012" for r in _table_rows(rep.stdout.split("\nbest", 1)[0], n)}
    assert [rows[i][3] for i in range(3)] == ["COMPLETED", "COMPLETED", "FAILED"], rep.stdout
    text = page.read_text()
    assert "No best trial: no trial has printed a JSON object of numbers." in text
    trials = text.split("<h2>Trials (3)</h2>", 1)[1].split("</table>", 1)[0]
    assert trials.count("<tr>") == 4 and "<td>FAILED</td><td>3</td>" in trials
    assert "Layout of trial 1 (the last completed trial with records" in text


def test_a_chain_reports_the_step_reached_and_the_last_checkpoint(run_wml, tmp_path):
    """One segment runs all 25 steps, saving every 10 (steps 9 and 19): it reached step 24, and its
    last checkpoint is 19; the run finishes there (the last step ends it without a save)."""
    out = tmp_path / "out"
    out.mkdir()
    proc = _wml(run_wml, "submit", "--chain", "2", "-t", "120s", "--ranks-per-node", "2", "-J", "reach", "--json",
                "python", str(CHAIN_PROGRAM), str(out), "--steps", "25", "--every", "10", "--step-seconds", "0",
                timeout=300)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    assert "finished in segment 1 of 2" in proc.stdout + proc.stderr, (proc.stdout + proc.stderr)[-4000:]
    run_id = json.loads(proc.stdout.splitlines()[-1])["run_id"]
    page = tmp_path / "chain.html"
    rep = _wml(run_wml, "report", run_id, "--html", str(page))
    assert rep.returncode == 0, rep.stderr
    first = _flat(rep.stdout.split("\n┏", 1)[0].split("\nsegments", 1)[0])
    assert first.startswith(f"run {run_id} (chain of 2): {CHAIN_PROGRAM} {out} --steps 25 --every 10 "), first
    assert "on local, 1 node x 2 ranks" in first and "reached step 24, last checkpoint 19" in first, first
    header = next(line for line in rep.stdout.splitlines() if line.startswith("┃"))
    cells = [c.strip() for c in header.strip("┃").split("┃")]
    assert cells[-2:] == ["step reached", "last checkpoint"], header
    [seg] = _table_rows(rep.stdout, "1/2")
    assert seg[1] == "COMPLETED" and seg[2] == "0" and seg[-2:] == ["24", "19"], rep.stdout
    text = page.read_text()
    assert "<th>step reached</th><th>last checkpoint</th>" in text
    assert "<td>24</td><td>19</td>" in text
    dom = _chromium("--dump-dom", page.as_uri()).stdout
    timeline = dom.split('data-section="timeline"', 1)[1].split('class="wml-plot"', 1)[0]
    assert "reached step 24, last checkpoint 19" in timeline       # the segment's note on the timeline
    assert drawn(page)["timeline"] >= 1
    # wml jobs: STEP is the step reached, CKPT the last checkpoint; wml status says both
    jobs = _wml(run_wml, "jobs").stdout.splitlines()
    head = jobs[0].split()
    run_row = next(line.split() for line in jobs if line.startswith("run "))
    assert run_row[head.index("STEP")] == "24" and run_row[head.index("CKPT")] == "19", jobs
    status = _wml(run_wml, "status", run_id)
    assert "reached step 24, last checkpoint 19" in status.stdout, status.stdout
    js = json.loads(_wml(run_wml, "status", run_id, "--json").stdout)
    assert js["step_reached"] == 24 and js["last_checkpoint"] == 19 and js["segments"][0]["step_reached"] == 24
