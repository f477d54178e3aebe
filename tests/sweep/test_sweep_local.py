"""``wml sweep`` and the Python API on the local site, for real: the trials run packed on
emulated nodes through ddlrun and mpiexec (pip's MPICH), a 2-rank torch (gloo) trial each."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

PROGRAMS = Path(__file__).parent / "programs"
KEEP_BUSY_SITE = """\
name: local8
description: this host seen as 8 cores (2 emulated nodes x 4 slots)
scheduler: local
launcher: mpiexec
platform: linux-64
node: {sockets: 1, cores_per_socket: 8, threads_per_core: 1, gpus_per_socket: 0}
total_nodes: 8
sweep: {default: packed}
"""


def _wml(run_wml, *args, timeout=300):
    proc = run_wml(*args, timeout=timeout, env={"KERAS_BACKEND": "torch"})
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def _show(run_wml, run_id):
    proc = _wml(run_wml, "sweep", "show", run_id, "--format", "json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_grid_of_a_two_rank_torch_script_packed_failed_trial_resumed_alone(run_wml, tmp_path):
    prog = str(PROGRAMS / "grid_train.py")
    (tmp_path / "fail-0.2-16").write_text("")
    proc = _wml(run_wml, "sweep", "--nodes", "2", "--pack", "4", "--param", "lr=0.1,0.2", "--param", "bs=8,16,32",
                "--json", prog, "--lr", "{lr}", "--bs", "{bs}", "--fail-if", str(tmp_path / "fail-{lr}-{bs}"))
    assert proc.returncode == 1, proc.stderr
    info = json.loads(proc.stdout.splitlines()[-1])
    run_id, run_dir = info["run_id"], Path(info["run_dir"])
    shown = _show(run_wml, run_id)
    assert [t["state"] for t in shown["trials"]] == ["COMPLETED"] * 4 + ["FAILED", "COMPLETED"], shown
    assert shown["trials"][4]["exit"] == 3 and shown["counts"]["FAILED"] == 1
    assert info["mode"] == "packed" and info["trials"] == 6
    for t in shown["trials"][:4]:     # the parameters reached argv and the environment, on 2 ranks
        assert t["world"] == 2 and float(t["env_lr"]) == t["lr"] and int(t["env_bs"]) == t["bs"]   # typed
        assert t["loss"] == pytest.approx(float(t["lr"]) * int(t["bs"]) * 3)
    placements = [json.loads((run_dir / "trials" / str(i) / "state.json").read_text())["placement"]
                  for i in range(6)]
    assert all(p["nodes"] in ([0, 1], [2, 3]) for p in placements)   # two trials at a time, 2 nodes each
    table = _wml(run_wml, "sweep", "show", run_id, "--sort", "loss")
    assert "trial 4 failed (exit status 3); its last lines:" in table.stdout
    assert "told to fail" in table.stdout
    losses = [float(ln.split()[-3]) for ln in table.stdout.splitlines()[2:8] if ln.split()[3] == "COMPLETED"]
    assert losses == sorted(losses)
    ends = {i: json.loads((run_dir / "trials" / str(i) / "state.json").read_text())["end"] for i in range(6)}
    (tmp_path / "fail-0.2-16").unlink()
    again = _wml(run_wml, "sweep", "resume", run_id, "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout.splitlines()[-1])["trials"] == [4]
    states = [json.loads((run_dir / "trials" / str(i) / "state.json").read_text()) for i in range(6)]
    assert [s["state"] for s in states] == ["COMPLETED"] * 6
    assert states[4]["attempt"] == 2 and all(states[i]["end"] == ends[i] for i in (0, 1, 2, 3, 5))  # only 4 ran
    status = _wml(run_wml, "status", run_id)
    assert "6 completed" in status.stdout and "trial 4" in status.stdout
    jobs = _wml(run_wml, "jobs")
    line = [ln for ln in jobs.stdout.splitlines() if run_id in ln]
    assert len(line) == 1 and line[0].startswith("sweep") and "6 completed" in line[0]
    logs = _wml(run_wml, "logs", run_id, "--trial", "4")
    assert '"trial": 4' in logs.stdout
    # wml report: the best trials by the metric, and a page with the metric against each parameter
    page = tmp_path / "sweep.html"
    rep = _wml(run_wml, "report", run_id, "--html", str(page))
    assert rep.returncode == 0, rep.stderr
    said = " ".join(rep.stdout.split())                 # the best line may wrap at the terminal's width
    assert "best by loss (smallest first, completed trials): trial 0 (2.4), trial 1 (4.8), trial 3 (4.8)" in said, \
        rep.stdout                                       # lr 0.1 x bs 8, 16; lr 0.2 x bs 8
    rows = [ln for ln in rep.stdout.splitlines() if ln.startswith("│")]
    assert sum("COMPLETED" in ln for ln in rows) == 6, rep.stdout      # the state whole, one row a trial
    from helpers.page import drawn

    marks = drawn(page)
    assert marks == {"sweep": 12, "timeline": 6}, marks   # 6 trials against lr, and against bs; a span a trial
    assert '"bs"' in page.read_text() and '"lr"' in page.read_text()


def test_eight_one_rank_trials_keep_every_slot_busy(run_wml, tmp_path):
    sites = tmp_path / "home" / ".config" / "wml" / "sites"
    sites.mkdir(parents=True)
    (sites / "local8.yaml").write_text(KEEP_BUSY_SITE)
    proc = _wml(run_wml, "sweep", "--site", "local8", "--pack", "2", "--cores-per-rank", "1", "--seeds", "8",
                "--json", str(PROGRAMS / "hold.py"), "3")
    assert proc.returncode == 0, proc.stderr
    run_dir = Path(json.loads(proc.stdout.splitlines()[-1])["run_dir"])
    states = [json.loads((run_dir / "trials" / str(i) / "state.json").read_text()) for i in range(8)]
    assert sorted(s["placement"]["nodes"][0] for s in states) == [0] * 4 + [1] * 4
    # every slot busy at once: each trial started before any trial ended (recorded times)
    assert max(s["start"] for s in states) < min(s["end"] for s in states), states


def test_python_submit_result_exception_and_map(isolated_env, tmp_path, monkeypatch):
    import cloudpickle

    from wmlce_tools import map as wml_map, submit

    from . import remote_functions as fns

    cloudpickle.register_pickle_by_value(fns)     # the job's Python cannot import the tests
    monkeypatch.chdir(tmp_path)
    job = submit(fns.scaled, 21, nodes=2, out=lambda s: None)
    assert job.result() == {"value": 42, "rank": 0, "world": 2}
    assert job.state() == "COMPLETED"
    with pytest.raises(ValueError, match="no negative values: -1") as err:
        submit(fns.scaled, -1, nodes=2, out=lambda s: None).result()
    remote = str(err.value.__cause__)
    assert "Traceback (most recent call last)" in remote and "def scaled" not in remote
    assert "remote_functions.py" in remote or "in scaled" in remote
    assert wml_map(fns.square, [3, 1, 2], pack=2) == [9, 1, 4]


def test_show_keeps_the_parameters_a_metric_of_that_name_gets_its_own_column(run_wml):
    """A trial that prints its parameters in its metrics line: ``lr`` says what it was given
    (nothing to add), ``bs`` differs (its own column); a failed trial, which printed nothing,
    still shows what it was given."""
    proc = _wml(run_wml, "sweep", "--param", "lr=0.5,0.25", "--param", "bs=2", "--json",
                str(PROGRAMS / "prints_params.py"), "--lr", "{lr}", "--bs", "{bs}", "--fail-lr", "0.25")
    assert proc.returncode == 1, proc.stderr
    run_id = json.loads(proc.stdout.splitlines()[-1])["run_id"]
    trials = _show(run_wml, run_id)["trials"]
    assert [(t["lr"], t["bs"], t["state"]) for t in trials] == [(0.5, 2, "COMPLETED"), (0.25, 2, "FAILED")]   # typed as given (issue 53)
    assert [(t["score"], t.get("metric:bs")) for t in trials] == [(1.0, 8), (None, None)]
    assert "metric:lr" not in trials[0]
    table = _wml(run_wml, "sweep", "show", run_id).stdout.splitlines()
    assert table[1].split() == ["TRIAL", "lr", "bs", "STATE", "EXIT", "WALLTIME_S", "metric:bs", "score"]
    assert table[3].split()[:5] == ["1", "0.25", "2", "FAILED", "3"]
