"""A chain on PBS Pro (Polaris) through the qsub double (tests/emulation/doubles/pbs: directives
checked, ``-W depend=afterany:ID`` honoured, each job run at once): PBS has no warning before the
walltime, so each segment's script keeps its own timer; the segment's walltime is the 5 minutes
of Polaris' debug queue minimum and the margin 295 s, so the timer fires 5 s in.  Real: wml, the job scripts,
ddlrun, the per-rank shim; the PALS mpiexec is the emulation double."""
from __future__ import annotations

import json
import subprocess
import sys

from emulation.chaining import one_job_result, segment_files, submit_chain
from emulation.test_pbs_scripts import job_env, records


def test_two_walltimes_through_qsub_with_the_scripts_own_timer(run_wml, isolated_env, tmp_path):
    env = job_env(isolated_env, tmp_path, {"PBS_DOUBLE_NODES": "2"})
    info, result = submit_chain(run_wml, env, tmp_path, ["--site", "polaris", "--nodes", "2", "--ranks-per-node", "1",
                                                         "-q", "debug", "-P", "datascience", "-t", "5",
                                                         "--signal-margin", "295s"], steps=15, per_walltime=10)
    ids = [s["job_id"] for s in info["segments"]]
    assert ids == ["1.pbs-double", "2.pbs-double", "3.pbs-double"]
    states = {i: json.loads((tmp_path / "pbs-state" / f"{i}.json").read_text())["Jobs"][i] for i in ids}
    assert [states[i]["Exit_status"] for i in ids] == [75, 0, 0]
    assert [states[i].get("depend") for i in ids] == [None, "afterany:1.pbs-double", "afterany:2.pbs-double"]
    assert json.loads(result.read_text()) == one_job_result(tmp_path, 15)
    texts = segment_files(info, ".out")
    assert "segment 1 of 3 stopped for the walltime at step 10; segment 2 resumes from it" in texts[0]
    assert "has already finished" in texts[2] and "resumes" not in texts[2]      # exited at once
    assert "wml: SIGUSR1 (this script's timer: the walltime is near)" in segment_files(info, ".err")[0]
    assert len(records(tmp_path, "mpiexec-pals")) == 2        # the third segment launched nothing


def test_qsub_double_holds_an_afterok_job_whose_dependency_failed(tmp_path):
    """The double itself: -W depend=afterany runs after a failure, afterok is held, an unknown id is refused."""
    from emulation.test_pbs_scripts import DOUBLES
    env = {"WML_DOUBLE_STATE": str(tmp_path / "st"), "HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    def qsub(text):
        s = tmp_path / "s.sh"
        s.write_text("#!/bin/bash\n#PBS -A p\n#PBS -l select=1\n#PBS -l walltime=00:01:00\n" + text)
        return subprocess.run([sys.executable, str(DOUBLES / "pbs" / "qsub"), str(s)], env=env, capture_output=True,
                              text=True, cwd=tmp_path, timeout=30)
    first = qsub("exit 3\n").stdout.strip()
    held = qsub(f"#PBS -W depend=afterok:{first}\necho ran >{tmp_path}/ok\n").stdout.strip()
    anyway = qsub(f"#PBS -W depend=afterany:{first}\necho ran >{tmp_path}/any\n").stdout.strip()
    assert (tmp_path / "any").exists() and not (tmp_path / "ok").exists(), (held, anyway)
    unknown = qsub("#PBS -W depend=afterany:99.pbs-double\ntrue\n")
    assert unknown.returncode == 153 and "Unknown Job Id 99.pbs-double" in unknown.stderr
