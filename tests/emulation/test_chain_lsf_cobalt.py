"""A run that needs three walltimes through a 3-job chain on LSF (Summit) and on Cobalt (Theta),
each under its scheduler's test doubles (tests/emulation/doubles/lsf, doubles/cobalt; see
doubles/_batch.py: each job runs at once, the scheduler's minutes scaled by
$WML_DOUBLE_SECONDS_PER_MINUTE), ending with the result of the same run done in one job.

- LSF sends the warning itself: ``#BSUB -wa USR1`` ``-wt 6`` with ``-W 10``: the bsub double sends
  SIGUSR1 to the job script 4 (scaled) minutes in, 10 s here; segment k+1 waits with
  ``-w "ended(<k>)"``, which a segment that exited 75 satisfies.
- Cobalt has no warning: the script's own timer (real seconds: -t 30, margin 1790 s, so 10 s in).
  Cobalt satisfies ``--dependencies`` only with exit status 0, so a segment that stopped for the
  walltime must exit 0 (its status, 75, in end.json) or the next one is dep_fail and never runs.
Real: wml, the job scripts, ddlrun, the per-rank shim, tests/chain/programs/resumable.py (10 steps a
walltime, 25 in all); jsrun and aprun are the launcher doubles.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

from emulation.chaining import one_job_result, segment_ends, segment_files, submit_chain
from emulation.test_pbs_scripts import DOUBLES, job_env, records

STEPS, PER_WALLTIME = 25, 10


def test_three_walltimes_through_bsub_with_lsfs_warning_and_ended_dependencies(run_wml, isolated_env, tmp_path):
    env = job_env(isolated_env, tmp_path, {"WML_DOUBLE_SECONDS_PER_MINUTE": "2.5"}, tools=("lsf",))
    info, result = submit_chain(run_wml, env, tmp_path, ["--site", "summit", "--nodes", "2", "--ranks-per-node", "1",
                                                         "-P", "abc123", "-t", "10", "--signal-margin", "6"],
                                steps=STEPS, per_walltime=PER_WALLTIME)
    ids = [s["job_id"] for s in info["segments"]]
    jobs = {r["job"]: r for r in records(tmp_path, "bsub")}
    assert [jobs[i]["exit_code"] for i in ids] == [75, 75, 0]
    assert [jobs[i]["w"] for i in ids] == [None, f"ended({ids[0]})", f"ended({ids[1]})"]
    # the warning came from LSF (the double), to the script, 4 scaled minutes in; no run limit reached
    assert [[what for _, what in jobs[i]["events"]] for i in ids] == [["script:SIGUSR1"], ["script:SIGUSR1"], []]
    assert json.loads(result.read_text()) == one_job_result(tmp_path, STEPS)
    outs = segment_files(info, ".out")
    assert "segment 2 of 3 stopped for the walltime at step 20; segment 3 resumes from it" in outs[1]
    assert "finished in segment 3 of 3" in outs[2] and "Successfully completed." in outs[2]
    assert "Exited with exit code 75." in outs[0]
    assert "wml: SIGUSR1 (the scheduler's warning before the walltime)" in segment_files(info, ".err")[0]
    status = run_wml("status", ids[0], "--json", env=env)
    assert json.loads(status.stdout)["state"] == "FINISHED", status.stdout + status.stderr


def test_three_walltimes_through_cobalt_qsub_with_the_scripts_own_timer(run_wml, isolated_env, tmp_path):
    env = job_env(isolated_env, tmp_path, {"WML_DOUBLE_SECONDS_PER_MINUTE": "2.5"}, tools=("cobalt",))
    info, result = submit_chain(run_wml, env, tmp_path, ["--site", "theta", "--nodes", "2", "--ranks-per-node", "1",
                                                         "-q", "debug-cache-quad", "-P", "datascience", "-t", "30",
                                                         "--signal-margin", "1790s"],
                                steps=STEPS, per_walltime=PER_WALLTIME)
    ids = [s["job_id"] for s in info["segments"]]
    jobs = {r["job"]: r for r in records(tmp_path, "qsub-cobalt")}
    assert [(jobs[i]["state"], jobs[i]["exit"]) for i in ids] == [("done", 0)] * 3     # none dep_fail
    assert [jobs[i]["dependencies"] for i in ids] == [None, ids[0], ids[1]]
    assert segment_ends(info) == [75, 75, 0]
    assert json.loads(result.read_text()) == one_job_result(tmp_path, STEPS)
    outs = segment_files(info, ".output")
    assert "segment 1 of 3 stopped for the walltime at step 10; segment 2 resumes from it" in outs[0]
    assert "exiting 0, not 75, so that Cobalt starts segment 2" in outs[0]
    assert "finished in segment 3 of 3" in outs[2]
    assert "wml: SIGUSR1 (this script's timer: the walltime is near)" in segment_files(info, ".error")[1]


def _submit(tool, script_text, tmp_path, stdin=False, **env):
    script = tmp_path / f"job{len(list(tmp_path.glob('job*.sh')))}.sh"
    script.write_text(script_text)
    script.chmod(0o755)
    full = {"WML_DOUBLE_STATE": str(tmp_path / "st"), "WML_DOUBLE_LOG": str(tmp_path / "log"), "HOME": str(tmp_path),
            "PATH": os.environ["PATH"], **env}
    argv = [sys.executable, str(DOUBLES / tool)] + ([] if stdin else [str(script)])
    with open(script) as f:
        return subprocess.run(argv, stdin=f if stdin else subprocess.DEVNULL, env=full, capture_output=True,
                              text=True, cwd=tmp_path, timeout=60)


def test_bsub_double_warns_wt_minutes_before_the_run_limit_then_ends_the_job(tmp_path):
    """The double itself, 1 s a minute: -W 4 -wt 3: SIGUSR1 to the script at 1 s, SIGUSR2 to the job
    at the limit (4 s), LSF's TERM_RUNLIMIT report; done() of a failed job stays pending for ever."""
    head = "#!/bin/bash\n#BSUB -P p\n#BSUB -nnodes 1\n#BSUB -W 4\n#BSUB -o out.%J\n"
    first = _submit("lsf/bsub", head + "#BSUB -wa USR1\n#BSUB -wt 3\nstart=$EPOCHREALTIME\n"
                    "trap 'echo warned after $start $EPOCHREALTIME' USR1\nwhile :; do sleep 0.1; done\n",
                    tmp_path, stdin=True, WML_DOUBLE_SECONDS_PER_MINUTE="1")
    assert first.stdout.strip() == "Job <1001> is submitted to queue <batch>.", first.stderr
    out = (tmp_path / "out.1001").read_text()
    # when the warning came, from the script's own clock (bash's $SECONDS counts whole wall-clock
    # seconds, so a warning 1.01 s in could read 2): about 1 s, long before the 4 s limit
    warned = re.search(r"warned after (\S+) (\S+)", out)
    assert warned and 0.5 <= float(warned[2]) - float(warned[1]) <= 2.5, out
    assert "TERM_RUNLIMIT" in out and "Exited with exit code 140." in out, out
    held = _submit("lsf/bsub", head + "#BSUB -w done(1001)\ntouch ran\n", tmp_path, stdin=True)
    assert "Job <1002> is submitted" in held.stdout and not (tmp_path / "ran").exists()
    bjobs = subprocess.run([sys.executable, str(DOUBLES / "lsf" / "bjobs"), "-noheader", "-o", "stat exit_code", "1002"],
                           env={"WML_DOUBLE_STATE": str(tmp_path / "st")}, capture_output=True, text=True, timeout=30)
    assert bjobs.stdout.split() == ["PEND", "-"]
    unknown = _submit("lsf/bsub", head + "#BSUB -w ended(99)\ntrue\n", tmp_path, stdin=True)
    assert unknown.returncode == 255 and "99: No matching job found" in unknown.stderr


def test_cobalt_qsub_double_runs_a_dependant_only_after_exit_status_0(tmp_path):
    head = "#!/bin/bash\n#COBALT -n 1\n#COBALT -t 10\n#COBALT -q debug-cache-quad\n#COBALT -A p\n"
    failed = _submit("cobalt/qsub", head + "exit 75\n", tmp_path).stdout.strip()
    dependant = _submit("cobalt/qsub", head + f"#COBALT --dependencies {failed}\ntouch ran\n", tmp_path).stdout.strip()
    assert not (tmp_path / "ran").exists()
    assert {r["job"]: r["state"] for r in map(json.loads, (tmp_path / "log").read_text().splitlines())} == \
        {failed: "done", dependant: "dep_fail"}
    ok = _submit("cobalt/qsub", head + "exit 0\n", tmp_path).stdout.strip()
    _submit("cobalt/qsub", head + f"#COBALT --dependencies {ok}\ntouch ran\n", tmp_path)
    assert (tmp_path / "ran").exists()
