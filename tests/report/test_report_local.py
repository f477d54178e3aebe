"""``wml report`` of a real job: 4 ranks on the local site (2 emulated nodes x 2 ranks), a small
torch script with ddl_runtime's DistributedOptimizer in which rank 2's compute takes 1.3x the
others' (tests/report/programs/train_small.py).  Real: wml submit, the job script, ddlrun, pip's
MPICH, the runtime's records, rich, plotly, and Debian's headless Chromium opening the page.

One job serves every test here (a module fixture): its report names rank 2 and its node as the
straggler with the others' wait, in the terminal, in ddlrun's end line (which names the command
that shows the report, ``wml report @N``), in ``wml status`` and on the page, whose every plot
holds data and whose colour scale starts at zero; the summary's first line and the page's head say
what ran; at 80 columns the summary keeps every line within them, never parts a number from its
unit and has no empty column; without plotly the summary ends with one line saying how to get
the page (exit 0), and ``--html`` is then one error; the same records with a rank's file gone are
reported as partial, naming that rank; a job that never started the runtime says what it lacks
in one line."""
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
    assert end[0].endswith(f" (wml report @{_ref(info)})"), end
    # wml status: one line of it
    status = _wml(env, base, "status", info["job_id"])
    assert status.returncode == 0, status.stderr
    run_line = [ln for ln in status.stdout.splitlines() if ln.strip().startswith("run:")]
    assert run_line and re.search(r"slowest rank 2 on node 1 \(.*\), \+\d+ %", run_line[0]), status.stdout
    # the terminal summary and the page
    page = base / "page.html"
    rep = _wml(env, base, "report", info["job_id"], "--html", str(page))
    assert rep.returncode == 0, rep.stderr
    flat = " ".join(rep.stdout.split())
    m = re.search(r"straggler: rank 2 on node 1 \(\S+\): compute [\d.]+ ms a step, \+(\d+) % on the others' median "
                  r"\([\d.]+ ms\); the others waited ([\d.]+) ms a step", flat)
    assert m, rep.stdout
    assert int(m.group(1)) >= 15 and float(m.group(2)) > 0, rep.stdout
    assert "straggler rank 0" not in rep.stdout and "straggler: rank 1 " not in rep.stdout
    assert "straggler: rank 3 " not in rep.stdout
    # what ran, first: the program and its arguments, site, nodes x ranks, start, wall time, exit status
    what = re.escape(f"{PROGRAM} {STEPS} 2 1.3 on local, 2 nodes x 2 ranks, started ")
    assert re.match(rf"job {info['job_id']} \(strag\): {what}\d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d UTC, ran \d+ s, "
                    r"exit 0 \(COMPLETED\)$", rep.stdout.splitlines()[0]), rep.stdout.splitlines()[0]
    text = page.read_text()
    assert "http://" not in text.split("<body", 1)[1] and "<script src" not in text   # nothing fetched
    assert "rank 2 (straggler)" in text and "straggler: rank 2" in text
    head = re.search(r'<p class="what">([^<]*)</p>', text)
    assert head and head.group(1) == rep.stdout.splitlines()[0].split(": ", 1)[1], (head, rep.stdout)
    layout = json.loads(re.search(r'"plot-layout",\s*(\[.*?\]),\s*\{', text, re.S).group(1))[0]
    assert layout["zmin"] == 0 and layout["zmax"] >= max(v for row in layout["z"] for v in row if v is not None)
    shot = base / "page.png"
    assert screenshot(page, shot)[0] == 1200
    marks = drawn(page)
    assert set(marks) == {"layout", "ranks", "steps"}, marks
    assert marks["layout"] >= 1 and marks["ranks"] >= 12 and marks["steps"] >= 4, (marks, shot)


def _ref(info) -> str:
    """The job's registry id (wml jobs' ID column, without its @)."""
    return (Path(info["script"]).parent / "wml-ref").read_text().strip().lstrip("@")


def test_the_summary_is_readable_at_80_columns(job):
    base, env, info, _ = job
    rep = _wml(dict(env, COLUMNS="80"), base, "report", f"@{_ref(info)}", "--no-html")
    assert rep.returncode == 0, rep.stderr
    lines = rep.stdout.splitlines()
    assert all(len(ln) <= 80 for ln in lines), [ln for ln in lines if len(ln) > 80]
    assert not any(re.match(r"\s*(%|ms\b)", ln) for ln in lines), rep.stdout      # a number keeps its unit
    header = next(ln for ln in lines if ln.startswith("┃"))
    cells = [c.strip() for c in header.strip("┃").split("┃")]
    assert cells[:7] == ["rank", "node", "steps", "step", "compute", "in comm.", "waiting"] and all(cells), header
    rows = [ln for ln in lines if re.match(r"│\s+\d+ │", ln)]
    assert len(rows) == 4 and all(len(r.split("│")) == len(cells) + 2 for r in rows), rep.stdout


def test_without_plotly_the_summary_says_how_to_get_the_page_and_html_is_one_error(job, tmp_path):
    base, env, info, _ = job
    blocker = tmp_path / "no-plotly"        # plotly as if not installed: its import fails as a missing module's
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text(
        "import sys\n"
        "class _NoPlotly:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'plotly' or name.startswith('plotly.'):\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
        "sys.meta_path.insert(0, _NoPlotly())\n")
    bare = dict(env, PYTHONPATH=f"{blocker}:{env['PYTHONPATH']}")
    ref = f"@{_ref(info)}"
    rep = _wml(bare, base, "report", ref)
    assert rep.returncode == 0 and rep.stderr == "", rep.stderr
    assert "straggler: rank 2 on node 1" in " ".join(rep.stdout.split())
    assert rep.stdout.splitlines()[-1] == (f"page: not written: the HTML report needs plotly: pip install "
                                           f"'wml[report]' (or plotly), then wml report {ref}"), rep.stdout
    assert not (Path(info["script"]).parent / "report.html").exists()
    asked = _wml(bare, base, "report", ref, "--html", str(tmp_path / "p.html"))
    assert asked.returncode == 2 and asked.stdout == "", asked.stdout
    assert asked.stderr.strip().splitlines() == [f"wml: error: --html {tmp_path / 'p.html'}: the HTML report needs "
                                                 "plotly: pip install 'wml[report]' (or plotly)"], asked.stderr
    assert not (tmp_path / "p.html").exists()


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
