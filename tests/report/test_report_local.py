"""``wml report`` of a real job: 4 ranks on the local site (2 emulated nodes x 2 ranks), a small
torch script with ddl_runtime's DistributedOptimizer in which rank 2's compute takes 1.3x the
others' (tests/report/programs/train_small.py).  Real: wml submit, the job script, ddlrun, pip's
MPICH, the runtime's records, rich, plotly, and Debian's headless Chromium opening the page.

One job serves every test here (a module fixture): its report names rank 2 and its node as the
straggler with the others' wait, in the terminal, in ddlrun's end line, in ``wml status`` and on
the page, whose every plot holds data; the same records with a rank's file gone are reported as
partial, naming that rank; a job that never started the runtime says what it lacks in one line."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.page import drawn, screenshot

PROGRAM = Path(__file__).parent / "programs" / "train_small.py"
STEPS = 60


def _env(base: Path) -> dict:
    home = base / "home"
    home.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("WML_", "LSB_", "SLURM_", "COBALT_", "DDL_", "PMI_", "OMPI_"))
           and k not in ("LINES", "COLUMNS")}
    env.update(HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"), XDG_DATA_HOME=str(home / ".local/share"),
               WML_JOBS_DIR=str(base / "wml-jobs"), WML_HOSTNAME="testhost.example.org", OMP_NUM_THREADS="1",
               COLUMNS="200", PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    return env


def _wml(env, cwd, *args, timeout=120):
    proc = subprocess.run([sys.executable, "-m", "wmlce_tools", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    base = tmp_path_factory.mktemp("report-job")
    env = _env(base)
    proc = _wml(env, base, "submit", "--site", "local", "-N", "2", "--ranks-per-node", "2", "-J", "strag", "--json",
                str(PROGRAM), str(STEPS), "2", "1.3", timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    info = json.loads(proc.stdout.splitlines()[-1])
    return base, env, info, proc


def test_the_slowed_rank_is_named_with_its_node_and_the_others_wait(job):
    base, env, info, submitted = job
    stats = Path(info["script"]).parent / "stats"
    assert sorted(p.name for p in stats.iterdir()) == [f"rank{i}.json" for i in range(4)]
    rank1 = json.loads((stats / "rank1.json").read_text())
    assert rank1["steps"] == STEPS and rank1["status"] == "finished" and rank1["size"] == 4
    params = 64 * 128 + 128 + 128 * 10 + 10
    assert rank1["bytes_reduced"] == STEPS * params * 4      # float32 gradients, every step
    assert rank1["node_index"] == 0 and json.loads((stats / "rank2.json").read_text())["node_index"] == 1
    # the end of the job's output: ddlrun's one line
    end = [ln for ln in submitted.stderr.splitlines() + submitted.stdout.splitlines() if "ddlrun: run report:" in ln]
    assert end and re.search(r"slowest rank 2 on node 1 \(\S+\), \+\d+ % \(a straggler: the others wait", end[0]), end
    # wml status: one line of it
    status = _wml(env, base, "status", info["job_id"])
    assert status.returncode == 0, status.stderr
    run_line = [ln for ln in status.stdout.splitlines() if ln.strip().startswith("run:")]
    assert run_line and re.search(r"slowest rank 2 on node 1 \(.*\), \+\d+ %", run_line[0]), status.stdout
    # the terminal summary and the page
    page = base / "page.html"
    rep = _wml(env, base, "report", info["job_id"], "--html", str(page))
    assert rep.returncode == 0, rep.stderr
    m = re.search(r"straggler: rank 2 on node 1 \(\S+\): compute [\d.]+ ms a step, \+(\d+) % on the median rank; "
                  r"the others waited ([\d.]+) ms a step", rep.stdout)
    assert m, rep.stdout
    assert int(m.group(1)) >= 15 and float(m.group(2)) > 0, rep.stdout
    assert "straggler rank 0" not in rep.stdout and "straggler: rank 1 " not in rep.stdout
    assert "straggler: rank 3 " not in rep.stdout
    text = page.read_text()
    assert "http://" not in text.split("<body", 1)[1] and "<script src" not in text   # nothing fetched
    assert "rank 2 (straggler)" in text and "straggler: rank 2" in text
    shot = base / "page.png"
    assert screenshot(page, shot)[0] == 1200
    marks = drawn(page)
    assert set(marks) == {"layout", "ranks", "steps"}, marks
    assert marks["layout"] >= 1 and marks["ranks"] >= 12 and marks["steps"] >= 4, (marks, shot)


def test_a_rank_without_its_record_is_reported_partial_naming_it(job, tmp_path):
    base, env, info, _ = job
    part = tmp_path / "stats"
    shutil.copytree(Path(info["script"]).parent / "stats", part)
    (part / "rank1.json").unlink()
    rep = _wml(env, base, "report", str(part), "--no-html")
    assert rep.returncode == 0, rep.stderr
    assert "PARTIAL: no record from rank 1 of 4" in rep.stdout, rep.stdout


def test_a_job_with_no_records_says_what_it_has_and_lacks_in_one_line(job):
    base, env, _, _ = job
    proc = _wml(env, base, "submit", "--site", "local", "--json", "true", timeout=120)
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout.splitlines()[-1])
    rep = _wml(env, base, "report", info["job_id"])
    assert rep.returncode == 2 and rep.stdout == "", (rep.stdout, rep.stderr)
    lines = rep.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"wml: error: job {info['job_id']}: completed; no records in "), lines
    assert "its ranks wrote none" in lines[0]
    assert not (Path(info["script"]).parent / "report.html").exists()
