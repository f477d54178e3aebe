"""Keras 3 on the TensorFlow backend with ddl_runtime: the seed's tf.keras script and model.fit.

Real ranks: `wml submit --nodes 2` (the local site's job script runs ddlrun) and `ddlrun -n 2`.
"""
import os
import re
import subprocess
import sys

import numpy as np

from fw_helpers import EXAMPLES, REPO, WORKERS, ddlrun

TF_ENV = {"KERAS_BACKEND": "tensorflow", "TF_CPP_MIN_LOG_LEVEL": "2"}


def test_seed_tf_keras_script_wml_submit_two_nodes(run_wml):
    """The WML CE tf.keras example with the seed's changes: each rank starts from its own random
    weights (no seed), ends with the same weights as every other rank, >= 0.9 on digits."""
    r = run_wml("submit", "--nodes", "2", str(EXAMPLES / "tf_keras_digits.py"),
                env={"OMP_NUM_THREADS": "1", "TF_CPP_MIN_LOG_LEVEL": "2", "DDL_STALL_SHUTDOWN_S": "60"},
                timeout=300)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-4000:]
    assert "Ranks: 2 - weights identical on every rank: True (max difference 0)" in out, out[-4000:]
    accuracies = [float(a) for a in re.findall(r"Test accuracy: ([0-9.]+)", out)]
    assert len(accuracies) == 2, out[-4000:]  # both ranks score the full test set ...
    assert accuracies[0] == accuracies[1] >= 0.9  # ... with the same weights
    assert out.count("Epoch 12/12") == 1  # rank 0 alone shows progress


def test_keras_fit_on_tensorflow_matches_one_process_with_double_batch(tmp_path):
    r = ddlrun(2, WORKERS / "tf_keras_checks.py", str(tmp_path), env=TF_ENV, timeout=240)
    assert r.returncode == 0, r.output
    d = [np.load(tmp_path / f"rank{i}.npz") for i in range(2)]
    assert str(d[0]["backend"]) == "tensorflow"
    assert np.abs(d[0]["start_mine"] - d[1]["start_mine"]).max() > 1e-2, "ranks were meant to start apart"
    # jit_compile=True was asked for; the callback turned it off for the step, with one notice
    assert not bool(d[0]["jit_after"])
    assert r.stderr.count("turned off XLA (jit_compile) for the train step") == 1, r.output
    # identical weights and optimizer state (Adam's, created lazily) on both ranks ...
    assert np.array_equal(d[0]["own"], d[1]["own"])
    assert np.array_equal(d[0]["opt"], d[1]["opt"]) and np.abs(d[0]["opt"]).max() > 0
    assert float(d[0]["divergence"]) == 0.0
    # ... equal to one process fitting the global batch from rank 0's start
    ref, start = d[0]["ref"], d[0]["start"]
    assert np.abs(ref - start).max() > 1e-2, "the reference did not train"
    assert np.abs(d[0]["own"] - ref).max() < 1e-4 * max(1.0, np.abs(ref).max())
    assert np.array_equal(d[0]["losses"], d[1]["losses"])  # DDLCallback averaged the metrics
    for rec in d:  # misuse: the same clear error on every rank, naming the variable
        msg = str(rec["mismatch"])
        assert msg.startswith("DDLMismatchError: ") and "hidden/kernel" in msg, msg
        assert "(6, 8)" in msg and "(6, 6)" in msg


def _python(code, env):
    e = {k: v for k, v in os.environ.items() if k not in ("KERAS_BACKEND",)}
    e.update(env, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="2")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=e, timeout=120)


def test_import_starts_nothing_and_keras_backend_follows_the_user():
    frameworks = "('tensorflow', 'keras', 'torch', 'mpi4py')"
    r = _python("import sys, ddl, ddl_runtime; import ddl_runtime.core.jobenv; "
                f"print([m for m in {frameworks} if m in sys.modules])", {})
    assert r.returncode == 0 and r.stdout.strip() == "[]", r.stdout + r.stderr
    # TensorFlow imported first, KERAS_BACKEND unset: Keras runs on TensorFlow, not the torch default
    r = _python("import tensorflow, ddl_runtime.keras, keras, torch; print(keras.backend.backend())", {})
    assert r.returncode == 0 and r.stdout.strip().splitlines()[-1] == "tensorflow", r.stdout + r.stderr
    # Keras already imported on TensorFlow: ddl_runtime.keras leaves it there
    r = _python("import os; os.environ['KERAS_BACKEND'] = 'tensorflow'; import keras; "
                "os.environ.pop('KERAS_BACKEND'); import ddl_runtime.keras; print(keras.backend.backend())", {})
    assert r.returncode == 0 and r.stdout.strip().splitlines()[-1] == "tensorflow", r.stdout + r.stderr
