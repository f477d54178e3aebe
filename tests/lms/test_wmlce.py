"""WML CE's LMS interface: torch.cuda.set_enabled_lms & co. under import ddl / ddl_runtime,
ddlrun --lms / WML_LMS=1 (no import), TensorFlow's names, Keras 3 on torch."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from lms_helpers import MB, assert_same, make_model, train

import ddl_runtime.lms as lms
from ddl_runtime.lms import config, wmlce
from ddl_runtime.lms.shim import SHIM_DIR

REPO = Path(__file__).resolve().parents[2]
WORKERS = Path(__file__).resolve().parent / "workers"
DDLRUN = [sys.executable, "-c", "from wmlce_tools.ddlrun.cli import main; main()"]


def _env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DDL_", "WML_", "OMPI_", "PMI_", "SLURM_"))}
    env.update(PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", KERAS_BACKEND="torch",
               PATH=os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", ""))
    env.update(extra)
    return env


def _py(code, timeout=240, **env):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout,
                          env=_env(**env), cwd=str(REPO))


@pytest.fixture
def settings():
    wmlce.install(torch)
    saved = config.Settings(**vars(config.SETTINGS))
    yield config.SETTINGS
    torch.cuda.set_enabled_lms(False)
    config.SETTINGS.__dict__.update(vars(saved))


def test_defaults_and_setters(settings):
    assert torch.cuda.get_enabled_lms() is False
    assert torch.cuda.get_limit_lms() == 0 and torch.cuda.get_size_lms() == 1048576
    torch.cuda.set_limit_lms(16 << 30)
    torch.cuda.set_size_lms(4096)
    assert torch.cuda.get_limit_lms() == 16 << 30 and torch.cuda.get_size_lms() == 4096
    for bad in (-1, 1.5, "1G"):
        with pytest.raises(lms.LmsError, match=r"^torch\.cuda\.set_limit_lms\(.*\): expected bytes"):
            torch.cuda.set_limit_lms(bad)


def test_import_ddl_or_ddl_runtime_installs_them_before_or_after_torch():
    for code in ("import ddl, torch", "import torch, ddl_runtime"):
        job = _py(code + "; torch.cuda.set_enabled_lms(True); print(torch.cuda.get_enabled_lms(), "
                         "torch.cuda.get_size_lms())")
        assert job.returncode == 0 and job.stdout.split() == ["True", "1048576"], (code, job.stderr)
    job = _py("import torch; torch.cuda.set_enabled_lms")
    assert job.returncode != 0 and "set_enabled_lms" in job.stderr    # a stock torch has none


def test_enabled_applies_to_every_model_with_the_same_results(settings, monkeypatch):
    monkeypatch.setenv("DDL_LMS_STANDIN_BYTES", str(1 << 30))
    reference = train(make_model())
    torch.cuda.set_limit_lms(4 * MB)
    torch.cuda.set_size_lms(1024)
    torch.cuda.set_enabled_lms(True)
    model = make_model()
    result = train(model)
    assert lms.stats(model).swapped_bytes > 0
    assert_same(result, reference)
    torch.cuda.set_enabled_lms(False)
    assert lms.get_session(model) is None and "forward" not in model.__dict__


def test_a_wmlce_script_runs_unchanged_under_the_shim_and_a_hidden_sitecustomize_still_runs(tmp_path):
    other = tmp_path / "site"
    other.mkdir()
    (other / "sitecustomize.py").write_text("import sys; sys.stderr.write('HIDDEN SITECUSTOMIZE RAN\\n')\n")
    job = subprocess.run([sys.executable, str(WORKERS / "wmlce_script.py")], capture_output=True, text=True,
                         timeout=240, cwd=str(tmp_path),
                         env=_env(PYTHONPATH=os.pathsep.join([SHIM_DIR, str(other), str(REPO)]), WML_LMS="1"))
    assert job.returncode == 0, job.stderr
    assert "NO_WML_IMPORT LMS_MODULE" in job.stdout
    assert job.stderr.count("LMS: no GPU") == 1 and "HIDDEN SITECUSTOMIZE RAN" in job.stderr, job.stderr


def test_ddlrun_lms_runs_the_wmlce_script_and_wml_lms_env_alike():
    for args, env in ((["--lms"], {}), ([], {"WML_LMS": "1"})):
        job = subprocess.run([*DDLRUN, *args, "-n", "1", "python", str(WORKERS / "wmlce_script.py")],
                             capture_output=True, text=True, timeout=240, env=_env(**env), cwd=str(REPO))
        assert job.returncode == 0, job.stdout + job.stderr
        assert "NO_WML_IMPORT LMS_MODULE" in job.stdout


def test_ddlrun_without_lms_leaves_torch_stock_and_a_bad_switch_is_one_line():
    job = subprocess.run([*DDLRUN, "--dry-run", "-n", "2", "python", "t.py"], capture_output=True, text=True,
                         timeout=60, env=_env(), cwd=str(REPO))
    assert SHIM_DIR not in job.stdout and "WML_LMS" not in job.stdout
    dry = subprocess.run([*DDLRUN, "--lms", "--dry-run", "-n", "2", "python", "t.py"], capture_output=True,
                         text=True, timeout=60, env=_env(), cwd=str(REPO))
    assert SHIM_DIR in dry.stdout and "WML_LMS" in dry.stdout, dry.stdout
    bad = subprocess.run([*DDLRUN, "--dry-run", "-n", "2", "python", "t.py"], capture_output=True, text=True,
                         timeout=60, env=_env(WML_LMS="maybe"), cwd=str(REPO))
    assert bad.returncode == 2 and bad.stderr.strip() == "ddlrun: error: WML_LMS='maybe' must be 1 or 0"


def test_tensorflow_lms_switches_say_torch_only_in_one_line(tmp_path):
    code = ("import tensorflow as tf; tf.config.experimental.set_lms_enabled(True); "
            "from tensorflow_large_model_support import LMS; LMS(); LMS(); print('RAN')")
    job = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=str(tmp_path),
                         env=_env(PYTHONPATH=os.pathsep.join([SHIM_DIR, str(REPO)]), WML_LMS="1",
                                  TF_CPP_MIN_LOG_LEVEL="3", KERAS_BACKEND="tensorflow"))
    assert job.returncode == 0 and "RAN" in job.stdout, job.stderr
    lines = [line for line in job.stderr.splitlines() if "Large Model Support" in line]
    assert lines == ["wml: Large Model Support is for torch only (torch.cuda.set_enabled_lms); "
                     "TensorFlow runs without it"] * 2, job.stderr   # once per switch


def test_keras3_on_torch_still_trains_with_lms_on():
    code = """
import numpy as np, keras, torch, ddl_runtime
def fit():
    keras.utils.set_random_seed(0)
    m = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation='relu'),
                          keras.layers.BatchNormalization(), keras.layers.Dense(2)])
    m.compile(optimizer='sgd', loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x = np.random.RandomState(0).randn(64, 8).astype('float32'); y = (x[:, 0] > 0).astype('int64')
    return m.fit(x, y, epochs=2, batch_size=16, verbose=0, shuffle=False).history['loss']
a = fit()
torch.cuda.set_enabled_lms(True)
b = fit()
import ddl_runtime.lms as lms
print('SAME' if a == b else f'DIFF {a} {b}', 'NONE' if lms.enable(keras.Sequential([keras.layers.Dense(2)])) is None else '')
"""
    job = _py(code, KERAS_BACKEND="torch")
    assert job.returncode == 0 and "SAME NONE" in job.stdout, job.stdout + job.stderr
    assert job.stderr.count("LMS: Keras models run through Keras's own layer calls") == 1, job.stderr
