"""Bad input gives one clear error before any communication, so no rank is left waiting."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

EXPECT = {
    "non-contiguous": ["w.strided", "not contiguous"],
    "read-only": ["w.readonly", "read-only"],
    "unsupported-dtype": ["w.uint8", "unsupported dtype uint8"],
    "complex-dtype": ["w.complex", "complex64"],
    "duplicate-names": ["duplicate tensor name 'w'"],
    "names-length": ["2 names for 1 tensors"],
    "bad-op": ["'prod'", "sum, avg, min, max"],
    "bad-op-n": ["'max'", "sum, avg"],
    "avg-int": ["steps", "int32"],
    "bad-check": ["check"],
    "bad-mpi": ["mpi must be True or False"],
    "not-a-list": ["expected a list"],
    "not-a-tensor": ["pylist", "numpy array or a torch tensor"],
    "bad-root": ["root 2", "0..1"],
    "bcast-readonly": ["read-only"],
    "torch-non-contiguous": ["w.t", "not contiguous"],
    "torch-meta-device": ["w.meta", "meta"],
    "torch-bool": ["mask", "bool"],
}


def test_bad_inputs_raise_before_communicating(run_mpi):
    result = run_mpi(2, "bad_inputs.py")
    assert result.returncode == 0, result.stderr[-3000:]
    (summary,) = result.json_lines("SUMMARY ")
    assert len(summary) == 2
    for rank in summary:
        assert rank["collectives_started"] == 0, "a bad call started a collective"
        assert rank["after_ok"], "the collective after the bad calls was wrong (ranks out of step)"
        assert set(rank["results"]) == set(EXPECT)
        for label, words in EXPECT.items():
            got = rank["results"][label]
            assert got["error"] is not None, f"{label}: no error raised"
            assert got["type"] == "DDLInputError" and got["value_error"], f"{label}: {got}"
            assert "\n" not in got["error"], f"{label}: message is not one line"
            for word in words:
                assert word in got["error"], f"{label}: {word!r} not in {got['error']!r}"
            assert got["ms"] < 50, f"{label} took {got['ms']:.1f} ms: it waited for something"


def run_python(code: str, env: dict | None = None, timeout: float = 60):
    environment = {k: v for k, v in os.environ.items() if not k.startswith("DDL_")}
    environment["PYTHONPATH"] = str(REPO)
    environment.update(env or {})
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout,
                          env=environment, cwd=str(REPO))


def test_calls_before_init_raise_clear_error():
    proc = run_python(
        "import numpy as np, ddl_runtime as d\n"
        "for call in (d.rank, d.size, lambda: d.allreduce(np.ones(2))):\n"
        "    try:\n        call()\n    except d.DDLError as e:\n        print('ERR', e)\n"
        "print('initialized', d.is_initialized())\n")
    assert proc.returncode == 0, proc.stderr
    errors = [line for line in proc.stdout.splitlines() if line.startswith("ERR")]
    assert len(errors) == 3 and all("not initialized: call ddl_runtime.init() first" in e for e in errors)
    assert "initialized False" in proc.stdout


def test_importing_ddl_starts_nothing():
    proc = run_python("import sys, ddl, ddl_runtime, ddl_runtime.core.jobenv\n"
                      "print(sorted(m for m in ('mpi4py.MPI', 'torch', 'keras') if m in sys.modules))")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_ddl_compat_module_initializes_on_first_use(run_mpi):
    result = run_mpi(2, "compat.py")
    assert result.returncode == 0, result.stderr
    assert sorted(result.lines("compat")) == ["compat rank=0 size=2 local=0 shard=[0, 1, 2]",
                                              "compat rank=1 size=2 local=1 shard=[3, 4]"]


@pytest.mark.parametrize("env, words", [
    ({"DDL_OPTIONS": "-mode p:3x1"}, ["mode p:3x1x1x1 describes 3 ranks but the job has 2"]),
    ({"DDL_OPTIONS": "-mode q:2x1"}, ["'q:2x1' is malformed", "p:6x2x1x1"]),
    ({"DDL_OPTIONS": "-mode p:2xx1"}, ["'p:2xx1' is malformed"]),
    ({"DDL_OPTIONS": "-mode"}, ["-mode needs a value"]),
    ({"DDL_EMULATE_NODES": "3"}, ["DDL_EMULATE_NODES=3 must divide the world size 2"]),
    ({"DDL_EMULATE_NODES": "two"}, ["DDL_EMULATE_NODES='two' is not an integer"]),
    ({"DDL_FUSION_MB": "-1"}, ["DDL_FUSION_MB='-1' must be 0 or more"]),
    ({"DDL_STALL_WARNING_S": "0"}, ["DDL_STALL_WARNING_S='0' must be greater than 0"]),
    ({"DDL_GPU_BINDING": "round-robin"}, ["DDL_GPU_BINDING='round-robin' must be one of per-rank, local-rank"]),
], ids=["mode-product", "mode-prefix", "mode-syntax", "mode-missing", "emulate-divide", "emulate-int",
        "fusion", "stall", "binding"])
def test_bad_settings_fail_init_on_every_rank(run_mpi, env, words):
    result = run_mpi(2, "topology.py", env=env, timeout=60)
    assert result.returncode != 0
    assert result.seconds < 20
    errors = [line for line in result.stderr.splitlines() if line.startswith("ddl_runtime.errors.DDLInputError")]
    assert len(errors) == 2, result.stderr[-2000:]  # both ranks, before any communication
    for word in words:
        assert word in errors[0]


def test_ddl_keras_callbacks_resolve_lazily():
    proc = run_python("import sys, ddl\n"
                      "assert 'keras' not in sys.modules\n"
                      "import ddl_runtime.keras as k\n"
                      "print(ddl.DDLCallback is k.DDLCallback, ddl.DDLGlobalVariablesCallback is k.DDLGlobalVariablesCallback)",
                      env={"KERAS_BACKEND": "torch"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "True True"


def test_init_failing_on_one_rank_aborts_the_job(run_mpi):
    """DDL_LAYOUT_GPUS names a GPU for local rank 0 only: rank 1 fails after communication began."""
    result = run_mpi(2, "topology.py", env={"DDL_LAYOUT_GPUS": "0"}, timeout=60)
    assert result.returncode != 0 and result.seconds < 30
    assert ("rank 1/2: init failed on this rank: DDLInputError: DDL_LAYOUT_GPUS lists GPUs for 1 local ranks; "
            "local rank 1 has none; aborting the job") in result.stderr
