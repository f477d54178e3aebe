"""Bad input: one line ``ddlrun: error: ...``, exit status != 0, no traceback, nothing run."""
from __future__ import annotations

import pytest

SLURM_ENV = {"SLURM_JOB_ID": "5", "SLURM_JOB_NODELIST": "n[1-2]", "SLURM_TASKS_PER_NODE": "2(x2)"}


@pytest.mark.parametrize("args, env, message", [
    (["--hostfile", "nope.txt", "--site", "slurm-gpu", "python"], {}, "hostfile nope.txt: no such file"),
    (["--hostfile", "empty.txt", "--site", "slurm-gpu", "python"], {}, "hostfile empty.txt is empty"),
    (["-H", "n[1-", "--site", "slurm-gpu", "python"], {}, "malformed hostlist 'n[1-'"),
    (["--site", "slurm-gpu", "python"], {"SLURM_JOB_NODELIST": "n[2-1]"}, "malformed hostlist 'n[2-1]': a range goes backwards"),
    (["--site", "slurm-gpu", "-n", "3", "python"], SLURM_ENV, "-n 3 is not a multiple of the 2 hosts"),
    (["--site", "slurm-gpu", "-n", "8", "python"], SLURM_ENV,
     "4 ranks on n1, which has 2 slot(s) (SLURM_JOB_NODELIST); pass --oversubscribe"),
    (["-H", "a:2,b:2", "--site", "slurm-gpu", "-n", "6", "python"], {}, "3 ranks on a, which has 2 slot(s)"),
    (["--site", "slurm-gpu", "-n", "6", "--ranks-per-node", "2", "python"], SLURM_ENV,
     "needs 3 hosts, but SLURM_JOB_NODELIST has 2"),
    (["-n", "2", "--mode", "p:3x1x1x1", "python"], {}, "--mode p:3x1x1x1: 3 ranks per node, 3 ranks in all, "
                                                       "but the job has 2 per node, 2 in all"),
    (["-n", "2", "--mode", "p:2x2", "python"], {}, "--mode p:2x2: 2 ranks per node, 4 ranks in all"),
    (["-n", "2", "--mode", "ring", "python"], {}, "--mode 'ring' is malformed"),
    (["-n", "2", "no-such-program-xyz"], {}, "program not found: 'no-such-program-xyz' is not on PATH"),
    (["-n", "2", "./missing.sh"], {}, "program not found: ./missing.sh"),
    (["-n", "2", "./notexec.sh"], {}, "program ./notexec.sh is not executable"),
    (["--site", "summit", "-H", "h1", "/bin/true"], {"PATH": "/nonexistent"},
     "jsrun not found: are you inside an LSF allocation on summit?"),
    (["--site", "theta", "-H", "nid00001", "/bin/true"], {"PATH": "/nonexistent"},
     "aprun not found: are you on a MOM node inside a Cobalt job on theta?"),
    (["--site", "slurm-gpu", "--ranks-per-node", "2", "/bin/true"], {**SLURM_ENV, "PATH": "/nonexistent"},
     "srun not found: are you inside a Slurm allocation on slurm-gpu?"),
    (["--mpiexec", "/no/such/mpiexec", "-n", "2", "python"], {}, "/no/such/mpiexec not found"),
    (["--mpiexec", "/bin/true", "-n", "2", "python"], {}, "names neither MPICH nor Open MPI"),
    (["-n", "0", "python"], {}, "-n must be >= 1"),
    (["-n", "2", "--ranks-per-node", "0", "python"], {}, "--ranks-per-node must be >= 1"),
    (["--emulate-nodes", "0", "python"], {}, "--emulate-nodes must be >= 1"),
    (["--cores-per-rank", "-1", "python"], {}, "--cores-per-rank must be an integer >= 1"),
    (["-n", "two", "python"], {}, "argument -n/-np/--np: invalid int value: 'two'"),
    (["--bogus", "python"], {}, "unrecognized arguments: --bogus"),
    (["-n", "2"], {}, "no program given"),
    (["-n", "3", "--emulate-nodes", "2", "python"], {}, "-n 3 is not a multiple of --emulate-nodes 2"),
    (["-H", "a,b", "-n", "2", "python"], {}, "the local site runs on this machine only"),
    (["--site", "slurm-gpu", "--emulate-nodes", "2", "python"], SLURM_ENV,
     "--emulate-nodes runs on one host, but SLURM_JOB_NODELIST names 2"),
    (["--site", "slurm-gpu", "-H", "a", "--emulate-nodes", "2", "python"], {},
     "--emulate-nodes needs a site without a scheduler (like 'local'); slurm-gpu uses slurm"),
    (["-H", "a", "--hostfile", "f", "python"], {}, "not allowed with argument"),
    (["-x", "1BAD=2", "python"], {}, "'1BAD' is not a valid environment variable name"),
    (["-x", "NOT_SET_ANYWHERE", "python"], {}, "-x NOT_SET_ANYWHERE: NOT_SET_ANYWHERE is not set here"),
    (["--mpiarg", "'unclosed", "python"], {}, "No closing quotation"),
    (["--site", "nosuchsite", "python"], {}, "unknown site 'nosuchsite'"),
    (["--site", "fakegpu", "-n", "2", "--gpus-per-rank", "3", "python"], {}, "but a fakegpu node has 4"),
    (["-n", "2", "python"], {"WML_DDLRUN_FAIL_GRACE_S": "soon"}, "WML_DDLRUN_FAIL_GRACE_S='soon'"),
])
def test_bad_input_is_one_line(ddlrun, tmp_path, args, env, message):
    (tmp_path / "empty.txt").write_text("\n# no hosts\n")
    (tmp_path / "notexec.sh").write_text("echo hi\n")
    r = ddlrun(*args, env=env)
    assert r.returncode != 0
    assert len(r.error_lines) == 1, r.stderr
    assert r.error_lines[0].startswith("ddlrun: error: ")
    assert message in r.error_lines[0]
    assert "Traceback" not in r.stderr and r.stdout == ""
