"""Bad input to every entry point added for the new sites, Horovod, TensorFlow and env integrity
(issue 14), typed as a user would: ONE line on stderr, exit status != 0, no traceback, and
nothing written (no job directory, no env prefix, no cluster base, no file in the working
directory).  Real subprocesses of the installed commands; the in-script cases (ddl_runtime's
TensorFlow API, horovod.torch) run under one ``ddlrun -n 2`` each and must raise a one-line
DDLInputError on every rank without leaving the other rank waiting."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PROGRAMS = Path(__file__).resolve().parent / "sweep_programs"
ROOT = os.geteuid() == 0
BIN = Path(sys.executable).parent

WML = [sys.executable, "-m", "wmlce_tools"]
DDLRUN = [sys.executable, "-m", "wmlce_tools.ddlrun.cli"]
LOCAL_SLURM = ["bash", str(REPO / "scripts" / "local-slurm"), "start", "1"]
HVD = ["--horovod", "-n", "1", "python", "{in}/p.py"]
SLURM_JOB = {"SLURM_JOB_ID": "7"}
PBS_JOB = {"PBS_JOBID": "7.pbs"}

# (id, argv, extra environment, a fragment the one error line must hold)
CASES = [
    # --alloc-flags (LSF only; SMT follows --threads-per-core; no shell text)
    ("alloc-smt4", WML + ["render", "-s", "summit", "-P", "a", "--alloc-flags", "smt4", "{in}/p.py"], {},
     "--alloc-flags 'smt4': the SMT level follows --threads-per-core"),
    ("alloc-semicolon", WML + ["render", "-s", "summit", "-P", "a", "--alloc-flags", "gpumps;rm -rf /", "{in}/p.py"],
     {}, "not an LSF allocation flag"),
    ("alloc-subst", WML + ["render", "-s", "summit", "-P", "a", "--alloc-flags", "$(id)", "{in}/p.py"], {},
     "'$(id)': not an LSF allocation flag"),
    ("alloc-on-pbs", WML + ["render", "-s", "polaris", "-P", "a", "--alloc-flags", "gpumps", "{in}/p.py"], {},
     "--alloc-flags is an LSF option; polaris uses pbs"),
    ("alloc-on-slurm", WML + ["submit", "-s", "frontier", "-P", "a", "--alloc-flags", "gpumps", "{in}/p.py"], {},
     "--alloc-flags is an LSF option; frontier uses slurm"),
    # --gpu-binding
    ("gpu-binding-bogus", WML + ["render", "-s", "polaris", "-P", "a", "--gpu-binding", "bogus", "{in}/p.py"], {},
     "--gpu-binding 'bogus': expected per-rank or local-rank"),
    ("gpu-binding-no-gpus", WML + ["render", "-s", "theta", "-P", "a", "--gpu-binding", "local-rank", "{in}/p.py"],
     {}, "--gpu-binding: theta nodes have no GPUs"),
    ("ddlrun-gpu-binding", DDLRUN + ["--gpu-binding", "bogus", "-n", "1", "python"], {},
     "--gpu-binding: invalid choice: 'bogus'"),
    # project_required
    ("polaris-no-project", WML + ["submit", "-s", "polaris", "{in}/p.py"], {}, "polaris charges every job to a project"),
    ("aurora-no-project", WML + ["render", "-s", "aurora", "{in}/p.py"], {}, "give -P/--project"),
    ("frontier-no-project", WML + ["render", "-s", "frontier", "{in}/p.py"], {}, "frontier charges every job"),
    ("project-metachar", WML + ["render", "-s", "polaris", "-P", "a;b", "{in}/p.py"], {}, "--project 'a;b': contains ';'"),
    # queues, walltimes and node counts on the new sites
    ("aurora-no-queue", WML + ["render", "-s", "aurora", "-P", "a", "-q", "nosuchqueue", "{in}/p.py"], {},
     "unknown queue 'nosuchqueue' on aurora; queues: prod, debug"),
    ("queue-metachar", WML + ["render", "-s", "aurora", "-P", "a", "-q", "$(id)", "{in}/p.py"], {}, "--queue '$(id)'"),
    ("polaris-walltime", WML + ["render", "-s", "polaris", "-P", "a", "-N", "10", "-t", "99h", "{in}/p.py"], {},
     "walltime 99:00 is above the 3:00 maximum"),
    ("polaris-debug-walltime", WML + ["render", "-s", "polaris", "-P", "a", "-q", "debug", "-t", "5h", "{in}/p.py"],
     {}, "above the 1:00 maximum for queue 'debug' on polaris"),
    ("frontier-walltime", WML + ["submit", "-s", "frontier", "-P", "a", "-t", "99h", "{in}/p.py"], {},
     "walltime 99:00 is above the 2:00 maximum"),
    ("perlmutter-walltime", WML + ["render", "-s", "perlmutter", "-P", "a", "-t", "99h", "{in}/p.py"], {},
     "above the 48:00 maximum for queue 'regular' on perlmutter"),
    ("walltime-garbage", WML + ["render", "-s", "aurora", "-P", "a", "-t", "abc", "{in}/p.py"], {}, "malformed walltime 'abc'"),
    ("nodes-zero", WML + ["submit", "-s", "aurora", "-P", "a", "-N", "0", "{in}/p.py"], {}, "--nodes must be an integer >= 1, got 0"),
    ("nodes-huge-polaris", WML + ["render", "-s", "polaris", "-P", "a", "-N", "999999", "{in}/p.py"], {},
     "999999 nodes is above the 496-node limit"),
    ("nodes-huge-perlmutter", WML + ["render", "-s", "perlmutter", "-N", "999999", "{in}/p.py"], {},
     "above the 1792-node limit"),
    ("smt-beyond-core", WML + ["render", "-s", "frontier", "-P", "a", "--threads-per-core", "7", "{in}/p.py"], {},
     "7 hw threads per core requested but a frontier core has 2"),
    # Horovod switches and settings, wml side (checked before the queue wait)
    ("render-WML_HOROVOD", WML + ["render", "-s", "polaris", "-P", "a", "--export", "WML_HOROVOD=maybe", "{in}/p.py"],
     {}, "WML_HOROVOD='maybe' must be 1 or 0"),
    ("render-horovod-export", WML + ["submit", "-s", "polaris", "-P", "a", "--horovod", "--export",
                                     "HOROVOD_FUSION_THRESHOLD=abc", "{in}/p.py"], {},
     "HOROVOD_FUSION_THRESHOLD='abc' is not a number"),
    # scheduler command timeouts: refused before the job directory is written
    ("connect-abc", WML + ["submit", "-s", "polaris", "-P", "a", "{in}/p.py"], {"WML_SCHEDULER_CONNECT_S": "abc"},
     "WML_SCHEDULER_CONNECT_S='abc' is not a number of seconds"),
    ("connect-negative", WML + ["submit", "-s", "frontier", "-P", "a", "{in}/p.py"], {"WML_SCHEDULER_CONNECT_S": "-1"},
     "WML_SCHEDULER_CONNECT_S='-1' must be between 0 and 600 seconds"),
    # ddlrun: allocations it reads
    ("nodefile-missing", DDLRUN + ["--site", "polaris", "-n", "1", "python"], {**PBS_JOB, "PBS_NODEFILE": "{in}/gone"},
     "PBS_NODEFILE='{in}/gone': no such file"),
    ("nodefile-empty", DDLRUN + ["--site", "aurora", "-n", "1", "python"], {**PBS_JOB, "PBS_NODEFILE": "{in}/empty"},
     "is empty"),
    ("nodefile-directory", DDLRUN + ["--site", "polaris", "-n", "1", "python"], {**PBS_JOB, "PBS_NODEFILE": "{in}"},
     "is a directory"),
    ("nodefile-binary", DDLRUN + ["--site", "polaris", "-n", "1", "python"], {**PBS_JOB, "PBS_NODEFILE": "{in}/binary"},
     "not a text file"),
    ("nodefile-metachar", DDLRUN + ["--site", "polaris", "-n", "1", "python"], {**PBS_JOB, "PBS_NODEFILE": "{in}/meta"},
     "expected 'host', 'host:N' or 'host slots=N'"),
    ("nodelist-unbalanced", DDLRUN + ["--site", "frontier", "python"], {**SLURM_JOB, "SLURM_JOB_NODELIST": "nid[01-"},
     "SLURM_JOB_NODELIST: malformed hostlist 'nid[01-': unbalanced brackets"),
    ("nodelist-backwards", DDLRUN + ["--site", "perlmutter", "python"], {**SLURM_JOB, "SLURM_JOB_NODELIST": "nid[05-01]"},
     "a range goes backwards"),
    ("nodelist-huge", DDLRUN + ["--site", "frontier", "python"], {**SLURM_JOB, "SLURM_JOB_NODELIST": "nid[1-9999999]"},
     "a range is too large"),
    ("nodelist-metachar", DDLRUN + ["--site", "frontier", "python"], {**SLURM_JOB, "SLURM_JOB_NODELIST": "a;b"},
     "'a;b' is not a host name"),
    ("tasks-garbage", DDLRUN + ["--site", "frontier", "python"],
     {**SLURM_JOB, "SLURM_JOB_NODELIST": "nid[01-02]", "SLURM_TASKS_PER_NODE": "2(x"},
     "SLURM_TASKS_PER_NODE: malformed task count list '2(x'"),
    ("tasks-count", DDLRUN + ["--site", "frontier", "python"],
     {**SLURM_JOB, "SLURM_JOB_NODELIST": "nid[01-02]", "SLURM_TASKS_PER_NODE": "2(x3)"}, "gives 3 counts for the 2 hosts"),
    ("tasks-zero", DDLRUN + ["--site", "frontier", "python"],
     {**SLURM_JOB, "SLURM_JOB_NODELIST": "nid[01-02]", "SLURM_TASKS_PER_NODE": "0,0"}, "a node with 0 tasks"),
    # ddlrun --horovod: HOROVOD_* refused before any rank starts
    ("WML_HOROVOD-maybe", DDLRUN + ["-n", "1", "python"], {"WML_HOROVOD": "maybe"}, "WML_HOROVOD='maybe' must be 1 or 0"),
    ("fusion-abc", DDLRUN + HVD, {"HOROVOD_FUSION_THRESHOLD": "abc"}, "HOROVOD_FUSION_THRESHOLD='abc' is not a number"),
    ("fusion-x-inf", DDLRUN + ["-x", "HOROVOD_FUSION_THRESHOLD=inf"] + HVD, {}, "must be a finite number >= 0"),
    ("stall-negative", DDLRUN + HVD, {"HOROVOD_STALL_CHECK_TIME_SECONDS": "-1"}, "HOROVOD_STALL_CHECK_TIME_SECONDS='-1'"),
    ("stall-shutdown-abc", DDLRUN + HVD, {"HOROVOD_STALL_SHUTDOWN_TIME_SECONDS": "x"}, "is not a number"),
    ("timeline-no-dir", DDLRUN + HVD, {"HOROVOD_TIMELINE": "/nonexistent/dir/t.json"},
     "HOROVOD_TIMELINE /nonexistent/dir/t.json: directory /nonexistent/dir does not exist"),
    ("timeline-is-dir", DDLRUN + ["-n", "1", "python", "{in}/p.py"], {"WML_HOROVOD": "1", "HOROVOD_TIMELINE": "{in}"},
     "is a directory"),
    ("ddlrun-timeline-no-dir", DDLRUN + ["--timeline", "/nonexistent/dir/t.json", "-n", "1", "python"], {},
     "--timeline /nonexistent/dir/t.json: directory /nonexistent/dir does not exist"),
    # env integrity: refused before any solve, download or prefix
    ("env-link-bogus", WML + ["env", "create", "--link", "bogus", "--prefix", "{out}/env", "wml-runtime"], {},
     "--link='bogus': expected one of auto, hardlink, reflink, copy"),
    ("WML_ENV_LINK-bogus", WML + ["env", "create", "--prefix", "{out}/env", "wml-runtime"], {"WML_ENV_LINK": "bogus"},
     "WML_ENV_LINK='bogus'"),
    ("WML_CACHE_CHECK-bogus", WML + ["env", "create", "--prefix", "{out}/env", "wml-runtime"],
     {"WML_CACHE_CHECK": "bogus"}, "WML_CACHE_CHECK='bogus': expected one of full, fast, skip"),
    ("clone-link-bogus", WML + ["env", "clone", "--link", "bogus", "{in}/nosuchenv", "{out}/env"], {}, "--link='bogus'"),
    ("repair-missing", WML + ["env", "repair", "{in}/nosuchenv"], {}, "environment {in}/nosuchenv does not exist"),
    ("repair-not-env", WML + ["env", "repair", "{in}"], {}, "is not a conda environment (no conda-meta/ directory)"),
    ("repair-unknown-name", WML + ["env", "repair", "nosuchname"], {}, "unknown environment 'nosuchname'"),
    # scripts/local-slurm: refused before its base directory exists (own base and port, never the shared one)
    ("slurm-threads-abc", LOCAL_SLURM, {"WML_SLURM_THREADS_PER_CORE": "abc"},
     "WML_SLURM_THREADS_PER_CORE must be a number from 1 to 8 that divides WML_SLURM_CPUS (2), got 'abc'"),
    ("slurm-threads-3", LOCAL_SLURM, {"WML_SLURM_THREADS_PER_CORE": "3"}, "got '3'"),
    ("slurm-threads-metachar", LOCAL_SLURM, {"WML_SLURM_THREADS_PER_CORE": "1;id"}, "got '1;id'"),
]


def _tree(root: Path) -> set:
    """Every path under ``root`` but wml's site-profile cache (~/.cache/wml: parsed profiles,
    written by any command that reads them, not output of the failed command)."""
    cache = root / "home" / ".cache"
    return {p.relative_to(root) for p in root.rglob("*") if cache not in (p, *p.parents)}


@pytest.fixture
def sweep_dirs(tmp_path, isolated_env):
    """{in}: the user's files; {out}: where nothing may appear; cwd is {out}."""
    inp, out = tmp_path / "in", tmp_path / "out"
    inp.mkdir()
    out.mkdir()
    (inp / "p.py").write_text("print('hello')\n")
    (inp / "empty").write_text("")
    (inp / "binary").write_bytes(b"\xff\xfe\x00node\n")
    (inp / "meta").write_text("h1 h2;rm\n")
    return inp, out


def _fill(text: str, inp: Path, out: Path) -> str:
    return text.replace("{in}", str(inp)).replace("{out}", str(out))


@pytest.mark.parametrize("name, argv, extra, fragment", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_and_writes_nothing(name, argv, extra, fragment, sweep_dirs, isolated_env, tmp_path):
    inp, out = sweep_dirs
    env = dict(isolated_env, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
               WML_SLURM_BASE=str(out / "slurm-base"), WML_SLURM_PORT="17961", WML_SLURM_NO_INSTALL="1",
               OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    for k in [k for k in env if k.startswith(("HOROVOD_", "PBS_"))]:
        del env[k]
    env.update({k: _fill(v, inp, out) for k, v in extra.items()})
    before = _tree(tmp_path)
    proc = subprocess.run([_fill(a, inp, out) for a in argv], cwd=out, env=env, capture_output=True, text=True,
                          timeout=60)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode != 0, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert len(lines) == 1, proc.stderr
    assert _fill(fragment, inp, out) in lines[0], lines[0]
    assert _tree(tmp_path) == before, f"{name} wrote {sorted(map(str, _tree(tmp_path) - before))}"


def _ranks_report(tmp_path, isolated_env, which: str, *ddlrun_args: str) -> str:
    env = dict(isolated_env, KERAS_BACKEND="tensorflow", TF_CPP_MIN_LOG_LEVEL="3",
               OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    proc = subprocess.run(DDLRUN + [*ddlrun_args, "-n", "2", sys.executable, str(PROGRAMS / "library_bad_input.py"),
                                    which], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def _cases(stdout: str, rank: int) -> dict:
    out = {}
    for line in stdout.splitlines():
        prefix = f"[{rank}] CASE "
        if line.startswith(prefix):
            name, _, rest = line[len(prefix):].partition(" ")
            out[name] = rest
    return out


def _assert_library_errors(stdout: str, expected: dict) -> None:
    for rank in (0, 1):
        got = _cases(stdout, rank)
        assert set(got) == set(expected), (rank, stdout)
        for name, (etype, fragment) in expected.items():
            assert got[name].startswith(f"{etype} lines=1 "), (rank, name, got[name])
            assert fragment in got[name], (rank, name, got[name])
        assert f"[{rank}] DONE 6.0" in stdout, stdout   # the ranks still agree afterwards


def test_tensorflow_api_bad_input_raises_one_line_on_every_rank(tmp_path, isolated_env):
    unsupported = "unsupported dtype {}; supported: float16, bfloat16, float32, float64, int32, int64"
    _assert_library_errors(_ranks_report(tmp_path, isolated_env, "tf"), {
        "tf_before_init": ("DDLInputError", "not initialized; call ddl_runtime.tensorflow.init() first"),
        "tf_non_tensor": ("DDLInputError", "is a builtins.str; expected a tf.Tensor or tf.Variable"),
        "tf_ragged_list": ("DDLInputError", "'tensor.0' is a builtins.list"),
        "tf_string": ("DDLInputError", unsupported.format("string")),
        "tf_complex64": ("DDLInputError", unsupported.format("complex64")),
        "tf_bool": ("DDLInputError", unsupported.format("bool")),
        "tf_bcast_string": ("DDLInputError", "unsupported dtype string"),
        "tf_allgather_string": ("DDLInputError", "unsupported dtype string"),
    })


def test_horovod_torch_bad_input_raises_one_line_on_every_rank(tmp_path, isolated_env):
    _assert_library_errors(_ranks_report(tmp_path, isolated_env, "torch", "--horovod"), {
        # Horovod's own exception and text for a call before init
        "hvd_before_init": ("ValueError", "Horovod has not been initialized; use hvd.init()."),
        "hvd_adasum": ("DDLInputError", "op=Adasum supports float16, float32 and float64 tensors, not torch.int32"),
        "hvd_bad_op": ("DDLInputError", "unknown op 42; use hvd.Average, Sum, Min, Max or Product"),
        "hvd_non_tensor": ("DDLInputError", "expected a torch.Tensor, got list"),
        "hvd_alltoall_splits_sum": ("DDLInputError", "the splits add up to 2, but the first dimension is 4"),
        "hvd_alltoall_splits_neg": ("DDLInputError", "splits must not be negative"),
        "hvd_alltoall_splits_len": ("DDLInputError", "1 splits for 2 ranks"),
        "hvd_alltoall_splits_list": ("DDLInputError", "splits must be a list of ints or an int32 tensor"),
        "hvd_alltoall_splits_float": ("DDLInputError", "splits must be a torch.int32 tensor, got torch.float32"),
        "hvd_broadcast_root_high": ("DDLInputError", "root_rank 2 is not a rank of the process set ([0, 1])"),
        "hvd_broadcast_root_neg": ("DDLInputError", "root_rank -1 is not a rank of the process set"),
        "hvd_process_set_dup": ("DDLInputError", "ranks [0, 0]: a rank is listed more than once"),
        "hvd_process_set_range": ("DDLInputError", "process set ranks [0, 5]: every rank must be in 0..1"),
        "hvd_process_set_str": ("DDLInputError", "ProcessSet: expected a list of ranks, got ['a']"),
        "hvd_process_set_empty": ("DDLInputError", "a process set with ranks [0, 1] exists already"),
    })
