"""Sweeps on Cobalt and LSF run end to end under the tests/emulation doubles.  A Theta sweep (Cobalt has no arrays: packed) run end to end: the job script wml rendered,
under bash with the variables Cobalt sets inside a 2-node job and the aprun TEST DOUBLE of
tests/emulation (strict about aprun's flags; runs the ranks on this host).  Real: the packed
runner, four whole-node trials two at a time (as ALCF's script mode runs several apruns from
one job), each trial's ddlrun and its aprun line, the trials' states and metrics."""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

EMULATION = Path(__file__).resolve().parents[1] / "emulation" / "doubles"
HOLD = Path(__file__).resolve().parent / "programs" / "hold.py"


def test_theta_sweep_runs_packed_two_whole_node_trials_at_a_time(isolated_env, tmp_path, monkeypatch):
    from wmlce_tools import api
    from wmlce_tools.options import JobOptions
    from wmlce_tools.sweeps.grid import build_trials
    from wmlce_tools.runs.sweep_submit import write_run_dir

    monkeypatch.chdir(tmp_path)
    sp = api.plan([str(HOLD), "2"], build_trials(seeds=4), max_running=2,
                  opts=JobOptions(site="theta", project="p", nodes=1, walltime="30"))
    assert sp.mode == "packed" and "Cobalt has no job arrays" in sp.why
    write_run_dir(sp)
    script = tmp_path / "job.sh"
    script.write_text(sp.script)
    script.chmod(0o755)
    log = tmp_path / "doubles.log"
    env = {k: v for k, v in isolated_env.items() if k not in ("BASH_ENV", "ENV", "MODULEPATH", "LOADEDMODULES")}
    env.update({"BASH_FUNC_module%%": f"() {{  . {shlex.quote(str(EMULATION / 'module'))} \"$@\"\n}}",
                "COBALT_JOBID": "4242", "COBALT_PARTNAME": "3820-3821", "COBALT_JOBSIZE": "2",
                "COBALT_PARTSIZE": "2", "WML_DOUBLE_LOG": str(log),
                "PATH": f"{EMULATION}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"})
    proc = subprocess.run([str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    states = [json.loads((sp.run_dir / "trials" / str(i) / "state.json").read_text()) for i in range(4)]
    assert [s["state"] for s in states] == ["COMPLETED"] * 4
    assert [s["metrics"] for s in states] == [{"seed": i} for i in range(4)]
    assert sorted(s["placement"]["nodes"][0] for s in states) == [0, 0, 1, 1]
    overlap = [sum(o["start"] <= s["start"] < o["end"] for o in states) for s in states]
    assert max(overlap) == 2, overlap          # two at a time, the allocation's two nodes
    apruns = [r for r in map(json.loads, log.read_text().splitlines()) if r["tool"] == "aprun"]
    assert len(apruns) == 4 and all(r["n"] == 1 and r["N"] == 1 for r in apruns), apruns


def test_summit_array_element_runs_its_one_trial_under_lsf(isolated_env, tmp_path, monkeypatch):
    """Element 2 of a Summit sweep's LSF array (LSB_JOBINDEX=2, indices from 1) runs trial 1
    and only it, through ddlrun and the jsrun double."""
    from wmlce_tools import api
    from wmlce_tools.options import JobOptions
    from wmlce_tools.sweeps.grid import build_trials
    from wmlce_tools.runs.sweep_submit import write_run_dir

    monkeypatch.chdir(tmp_path)
    sp = api.plan([str(HOLD), "0"], build_trials(seeds=3), max_running=2,
                  opts=JobOptions(site="summit", project="p", nodes=1, ranks_per_node=2, walltime="30", job_name="s"))
    assert sp.mode == "array" and '#BSUB -J "s[1-3]%2"' in sp.script
    write_run_dir(sp)
    script = tmp_path / "job.sh"
    script.write_text(sp.script)
    hostfile = tmp_path / "hosts"
    hostfile.write_text("batch1\n" + "h41n01\n" * 42)
    env = {k: v for k, v in isolated_env.items() if k not in ("BASH_ENV", "ENV", "MODULEPATH", "LOADEDMODULES")}
    env.update({"BASH_FUNC_module%%": f"() {{  . {shlex.quote(str(EMULATION / 'module'))} \"$@\"\n}}",
                "LSB_JOBID": "701106", "LSB_JOBINDEX": "2", "LSB_MCPU_HOSTS": "batch1 1 h41n01 42",
                "LSB_DJOB_HOSTFILE": str(hostfile), "LSB_DJOB_RANKFILE": str(hostfile),
                "WML_DOUBLE_LOG": str(tmp_path / "doubles.log"),
                "PATH": f"{EMULATION}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"})
    proc = subprocess.run(["bash", str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    trials = sp.run_dir / "trials"
    assert sorted(p.name for p in trials.iterdir()) == ["1"]
    st = json.loads((trials / "1" / "state.json").read_text())
    assert st["state"] == "COMPLETED" and st["metrics"] == {"seed": 1} and st["job_id"] == "701106"
