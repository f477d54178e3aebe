"""The Python API and ``wml sweep show`` where they misled (issue 53): a remote sys.exit,
unknown options, empty maps, command-line spellings, dry runs, the job's repr, the remote
traceback's file; sorting by number, largest first, typed parameters; and the sweep's own
slips (parameters the program never names, -A and -P naming two projects, a rerun's output)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from wmlce_tools.errors import WmlError

from . import remote_functions as fns


@pytest.fixture
def api(isolated_env, tmp_path, monkeypatch):
    import cloudpickle

    from wmlce_tools import api as wml_api

    cloudpickle.register_pickle_by_value(fns)     # the job's Python cannot import the tests
    monkeypatch.chdir(tmp_path)
    yield wml_api
    cloudpickle.unregister_pickle_by_value(fns)


def test_remote_exit_is_an_error_naming_the_status(api):
    job = api.submit(fns.quits, 4, out=lambda s: None)
    with pytest.raises(api.RemoteError, match=r"^trial 0: the function exited with status 4 \(sys.exit in the job\)$"):
        job.result()


def test_unpicklable_result_reads_plainly(api):
    with pytest.raises(api.RemoteError, match=r"^trial 0 failed: its return value does not pickle \(TypeError: "):
        api.submit(fns.lock, 0, out=lambda s: None).result()


def test_remote_traceback_names_the_functions_file(api):
    with pytest.raises(ValueError) as err:
        api.submit(fns.scaled, -1, out=lambda s: None).result()
    remote = str(err.value.__cause__)
    assert "<dynamic-code>" not in remote and 'remote_functions.py", line' in remote
    assert 'raise ValueError(f"no negative values: {x}")' in remote      # the line, read from the file


def test_api_edges_answered_in_python_terms(api):
    with pytest.raises(WmlError, match=r"unknown job option 'x' \(the function's own keyword arguments go in kwargs="):
        api.submit(fns.square, x=3)
    with pytest.raises(WmlError, match="submit: 42 is neither a function nor a program"):
        api.submit(42)
    assert api.map(fns.square, []) == []
    with pytest.raises(WmlError, match=r"^nodes must be an integer >= 1, got 0$"):
        api.submit(fns.square, 1, nodes=0)



def test_dry_run_submits_nothing(api, tmp_path):
    sp = api.submit(fns.square, 3, dry_run=True)
    assert "# sweep: 1 trial(s)" in sp.describe() and "wmlce_tools.api.remote" in sp.script
    assert not (tmp_path / "wml-jobs").exists() or not list((tmp_path / "wml-jobs").iterdir())


def test_job_repr_says_what_it_is(api):
    job = api.submit(fns.square, 3, out=lambda s: None)
    assert job.result() == 9
    assert repr(job).startswith(f"<wml job {job.run_id}: 1 trial(s) on local, ") and "1 completed" in repr(job)


def _sweep(run_wml, *args):
    proc = run_wml("sweep", "--json", *args, timeout=120)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc, json.loads(proc.stdout.splitlines()[-1])


def test_show_sorts_numbers_as_numbers_largest_first_typed(run_wml, tmp_path):
    prog = tmp_path / "p.py"
    prog.write_text("import json, sys\nprint(json.dumps({'acc': int(sys.argv[1]) % 10}))\n")
    proc, info = _sweep(run_wml, "--param", "bs=64,128,9", "--param", "lr=0.1", str(prog), "{bs}", "{lr}")
    assert proc.returncode == 0, proc.stderr
    shown = json.loads(run_wml("sweep", "show", info["run_id"], "--sort", "bs", "--format", "json").stdout)
    assert [t["bs"] for t in shown["trials"]] == [9, 64, 128] and shown["trials"][0]["lr"] == 0.1
    shown = json.loads(run_wml("sweep", "show", info["run_id"], "--sort", "-acc", "--format", "json").stdout)
    assert [t["acc"] for t in shown["trials"]] == [9, 8, 4] and [t["bs"] for t in shown["trials"]] == [9, 128, 64]
    table = run_wml("sweep", "show", info["run_id"], "--sort", "-bs").stdout.splitlines()
    assert [ln.split()[1] for ln in table[2:5]] == ["128", "64", "9"]


def test_sweep_slips_are_said(run_wml, tmp_path):
    prog = tmp_path / "p.py"
    prog.write_text("import sys\nsys.exit(3)\n")
    proc, info = _sweep(run_wml, "--param", "lr=0.1,0.2", "--param", "bs=1", str(prog), "--lr", "0.1")
    assert ("wml: warning: the program's arguments name no parameter: its trials differ in lr only through the "
            "environment (WML_PARAM_LR)") in proc.stderr
    shown = run_wml("sweep", "show", info["run_id"], "--tail", "1").stdout
    assert "trial 0 failed (exit status 3); its last lines:\n    ddlrun: rank 0 failed first" in shown   # not its launch line
    again = run_wml("sweep", "resume", info["run_id"], timeout=120)
    assert again.returncode != 0
    assert "trial(s) 0, 1 ran again: trial 0 failed again (exit status 3); trial 1 failed again (exit status 3)" in again.stderr
    trial0 = Path(info["run_dir"]) / "trials" / "0"
    assert (trial0 / "output.attempt-1.log").exists() and (trial0 / "output.log").exists()


def test_account_and_project_naming_two_projects_refused(run_wml, tmp_path):
    prog = tmp_path / "p.py"
    prog.write_text("print(1)\n")
    two = run_wml("render", "--site", "frontier", "-A", "ABC", "-P", "DEF", str(prog))
    assert two.returncode != 0 and "-A/--account and -P/--project name one project, given ABC and DEF" in two.stderr
    same = run_wml("render", "--site", "frontier", "-A", "ABC", "-P", "ABC", str(prog))
    assert same.returncode == 0 and "#SBATCH --account=ABC" in same.stdout


def test_local_submit_returns_at_once_and_jobs_run_side_by_side(api):
    import time

    t0 = time.monotonic()
    first = api.submit(fns.nap, 3, out=lambda s: None)
    second = api.submit(fns.nap, 3, out=lambda s: None)
    assert time.monotonic() - t0 < 2.5                    # each returned once recorded, not after 3 s
    assert first.state() in ("PENDING", "RUNNING") and second.view(refresh=False).live
    slow = api.submit(fns.nap, 60, out=lambda s: None)
    assert slow.cancel() == [slow.view(refresh=False).jobs[0].job_id]
    assert slow.wait(timeout=60) == "CANCELLED"
    assert first.result() == 3 and second.result() == 3
    starts = [json.loads((j.run_dir / "trials" / "0" / "state.json").read_text()) for j in (first, second)]
    assert max(s["start"] for s in starts) < min(s["end"] for s in starts)     # ran at the same time
