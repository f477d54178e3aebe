"""A torch run stopped by the walltime signal and resumed equals one uninterrupted run, bit for bit.

Real jobs: `ddlrun -n 2` (pip's MPICH), programs/torch_chain.py with ddl_runtime.torch's
Checkpointer.  The signal goes to one rank only (the agreement must carry it to the other),
or to both ranks' rankexec (what ddlrun's forwarding does).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers.mpi import REPO

PROGRAM = Path(__file__).resolve().parent / "programs" / "torch_chain.py"
STEPS = 30


def _env(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WML_", "DDL_", "SLURM_", "PMI_", "OMPI_"))}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env["OMP_NUM_THREADS"] = "1"
    env.update(extra)
    return env


def _start(out: Path, *args: str, **env: str) -> subprocess.Popen:
    """programs/torch_chain.py under `ddlrun -n 2` (the rest of the command line: `args`)."""
    out.mkdir(parents=True, exist_ok=True)
    for stale in out.glob("pid.rank*"):
        stale.unlink()
    cmd = [sys.executable, "-m", "wmlce_tools.ddlrun.cli", "-n", "2", "python", str(PROGRAM), str(out),
           "--steps", str(STEPS), *args]
    return subprocess.Popen(cmd, cwd=str(REPO), env=_env(**env), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)


def _finish(proc: subprocess.Popen, timeout: float = 120) -> tuple:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise AssertionError(f"the job did not end within {timeout} s\n{out[-2000:]}\n{err[-2000:]}") from None
    return proc.returncode, out, err


def _final(out: str) -> str:
    finals = [line.split("FINAL ", 1)[1] for line in out.splitlines() if "FINAL " in line]
    assert len(finals) == 1, out[-2000:]
    return finals[0]


def _wait_for(predicate, proc: subprocess.Popen, what: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert proc.poll() is None, f"the job ended before {what}: {_finish(proc)}"
        assert time.monotonic() < deadline, f"no {what} within {timeout} s"
        time.sleep(0.005)


def _progress(out: Path) -> int:
    try:
        return int((out / "progress").read_text() or -1)
    except (FileNotFoundError, ValueError):
        return -1


def _pids(out: Path, rank: int) -> tuple:
    program, rankexec = (out / f"pid.rank{rank}").read_text().split()
    return int(program), int(rankexec)


_REFERENCES: dict = {}


def _reference(mode: str, tmp_path_factory) -> str:
    """The final weights' hash of the same run done in one job (no checkpoint directory at all)."""
    if mode not in _REFERENCES:
        code, out, err = _finish(_start(tmp_path_factory.mktemp("reference"), "--mode", mode))
        assert code == 0, err[-3000:]
        _REFERENCES[mode] = _final(out)
    return _REFERENCES[mode]


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> str:
    return _reference("optimizer", tmp_path_factory)


@pytest.mark.parametrize("mode, target", [("optimizer", "rank 1 only"), ("plain", "every rankexec"),
                                          ("elastic", "rank 1 only")])
def test_a_stop_signal_saves_exits_75_and_the_resumed_run_ends_with_the_same_weights(tmp_path_factory, tmp_path,
                                                                                     mode, target):
    """optimizer: the stop rides in the gradient reduction; plain: agree()'s own collective;
    elastic: hvd.elastic's commit() is the step boundary and run() restores."""
    reference = _reference(mode, tmp_path_factory)
    ckpt = tmp_path / "ckpt"
    env = {"WML_CHECKPOINT_DIR": str(ckpt), "WML_STOP_SIGNAL": "USR1"}
    proc = _start(tmp_path / "run", "--mode", mode, **env)
    _wait_for(lambda: _progress(tmp_path / "run") >= 8 and (tmp_path / "run" / "pid.rank1").exists(), proc, "step 8")
    if target == "rank 1 only":
        os.kill(_pids(tmp_path / "run", 1)[0], signal.SIGUSR1)
    else:
        for rank in (0, 1):
            os.kill(_pids(tmp_path / "run", rank)[1], signal.SIGUSR1)
    code, out, err = _finish(proc)
    assert code == 75, err[-3000:]
    assert "stop agreed at step" in err
    latest = json.loads((ckpt / "latest.json").read_text())
    assert 8 <= latest["step"] < STEPS - 1
    assert latest["framework"] == ("horovod-elastic" if mode == "elastic" else "torch")
    assert not any("FINAL" in line for line in out.splitlines())

    code, out, err = _finish(_start(tmp_path / "run", "--mode", mode, **env))
    assert code == 0, err[-3000:]
    assert f"resuming from the checkpoint of step {latest['step']}" in err
    assert _final(out) == reference


def test_a_rank_killed_during_the_save_leaves_the_previous_checkpoint_usable(reference, tmp_path):
    """Rank 0 is SIGKILLed while it writes the step-9 checkpoint (its state takes long to pickle):
    latest.json still names step 4, whose files verify, and the next run resumes from it."""
    ckpt = tmp_path / "ckpt"
    env = {"WML_CHECKPOINT_DIR": str(ckpt), "WML_STOP_SIGNAL": "USR1"}
    proc = _start(tmp_path / "run", "--every", "5", "--slow-save-from", "9", **env)
    _wait_for(lambda: ckpt.is_dir() and any(p.name.startswith(".tmp-step-00000009") for p in ckpt.iterdir()),
              proc, "the step-9 save")
    os.kill(_pids(tmp_path / "run", 0)[0], signal.SIGKILL)
    code, _, err = _finish(proc, timeout=60)
    assert code != 0
    assert json.loads((ckpt / "latest.json").read_text())["step"] == 4
    assert not (ckpt / "step-00000009.json").exists()

    code, out, err = _finish(_start(tmp_path / "run", **env))
    assert code == 0, err[-3000:]
    assert "resuming from the checkpoint of step 4" in err
    assert _final(out) == reference
