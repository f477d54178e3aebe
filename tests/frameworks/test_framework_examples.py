"""The digits examples train to >= 95 % test accuracy, 1 rank and 2 ranks, and end in sync."""
import json

import pytest

from fw_helpers import EXAMPLES, read_json, run


def _check_train_digits(result_json, stdout, ranks):
    res = read_json(result_json)
    assert res["ranks"] == ranks
    assert res["test_accuracy"] >= 0.95, res
    assert res["identical"] and res["max_divergence"] == 0.0
    # rank 0 alone logs: one line per epoch, and the verdict
    assert stdout.count("epoch   8/8") == 1, stdout[-3000:]
    assert f"all {ranks} rank(s) hold identical parameters" in stdout
    # rank 0's JSON line of metrics, once: what a sweep's trial records (README: wml sweep show --sort loss)
    metrics = [json.loads(line.split("] ", 1)[-1]) for line in stdout.splitlines()
               if line.split("] ", 1)[-1].startswith("{")]
    assert len(metrics) == 1 and set(metrics[0]) == {"loss", "acc", "test_acc", "seconds"}, stdout[-3000:]
    assert metrics[0]["test_acc"] == pytest.approx(res["test_accuracy"], abs=1e-6) and 0 < metrics[0]["loss"] < 1, metrics


def test_train_digits_plain_python(tmp_path):
    """One rank, no launcher: mpi4py's singleton init."""
    out, ckpt = tmp_path / "result.json", tmp_path / "model.pt"
    r = run(None, EXAMPLES / "train_digits.py", "--epochs", "8", "--json", str(out),
            "--checkpoint", str(ckpt), timeout=180)
    assert r.returncode == 0, r.output
    _check_train_digits(out, r.stdout, 1)
    assert ckpt.exists()


def test_train_digits_wml_submit_two_nodes(run_wml, tmp_path):
    """The README's main command: `wml submit --nodes 2 examples/train_digits.py` on the local
    site (the job script runs ddlrun, which runs mpiexec with 2 ranks)."""
    out, ckpt = tmp_path / "result.json", tmp_path / "model.pt"
    r = run_wml("submit", "--nodes", "2", str(EXAMPLES / "train_digits.py"), "--epochs", "8",
                "--json", str(out), "--checkpoint", str(ckpt), timeout=240)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    _check_train_digits(out, r.stdout, 2)
    assert ckpt.exists()


@pytest.mark.parametrize("ranks", [None, 2], ids=["python", "mpiexec-n2"])
def test_keras_digits(tmp_path, ranks):
    out = tmp_path / "result.json"
    r = run(ranks, EXAMPLES / "keras_digits.py", "--epochs", "6", "--json", str(out), timeout=180)
    assert r.returncode == 0, r.output
    res = read_json(out)
    assert res["ranks"] == (ranks or 1)
    assert res["test_accuracy"] >= 0.95, res
    assert res["identical"]
    assert r.stdout.count("Epoch 6/6") == 1, r.output


def test_bench_scaling_reports_every_configuration(tmp_path):
    """examples/bench_scaling.py --mode jobs with --independent and --lockstep (BENCHMARKS.md's
    command, tiny): every configuration ran and the ratios are the ones reported."""
    out = tmp_path / "scaling.json"
    r = run(None, EXAMPLES / "bench_scaling.py", "--mode", "jobs", "--batch-size", "32", "--repeats", "1",
            "--steps", "10", "--warmup", "2", "--independent", "--lockstep", "--json", str(out), timeout=240)
    assert r.returncode == 0, r.output
    res = read_json(out)
    for key in ("median_1", "median_2", "median_independent", "median_lockstep"):
        assert res[key] > 0, (key, res)
    assert abs(res["efficiency_vs_lockstep"] - res["median_2"] / res["median_lockstep"]) < 1e-9
    assert "ranks in lockstep (a barrier per step, no gradients exchanged)" in r.stdout


def test_bench_scaling_phases_with_independent_ranks(tmp_path):
    """examples/bench_scaling.py's default phases mode with --independent, --lockstep and --floor
    (tiny, gradients in shared memory): one 2-rank job alternating 1-rank, 2-independent,
    2-lockstep, 2-hand-averaged and 2-rank phases; the per-repeat ratios are the reported ones
    and both averaged models end in sync (the tool refuses a diverged hand-averaged one)."""
    out = tmp_path / "scaling.json"
    r = run(None, EXAMPLES / "bench_scaling.py", "--batch-size", "32", "--repeats", "3", "--steps", "10",
            "--warmup", "2", "--independent", "--lockstep", "--floor", "--gradient-as-bucket-view",
            "--json", str(out),
            timeout=240)
    assert r.returncode == 0, r.output
    res = read_json(out)
    assert res["max_divergence"] == 0.0
    assert len(res["samples_per_s_1"]) == len(res["samples_per_s_2"]) == len(res["samples_per_s_independent"]) == 3
    assert all(v > 0 for v in res["samples_per_s_independent"])
    ratios = sorted(m / i for m, i in zip(res["samples_per_s_2"], res["samples_per_s_independent"]))
    assert abs(res["pair_vs_independent_median"] - ratios[1]) < 1e-9
    assert res["pair_vs_independent_range"] == [ratios[0], ratios[-1]]
    assert len(res["samples_per_s_lockstep"]) == 3
    ratios = sorted(m / i for m, i in zip(res["samples_per_s_2"], res["samples_per_s_lockstep"]))
    assert abs(res["pair_vs_lockstep_median"] - ratios[1]) < 1e-9
    assert len(res["samples_per_s_floor"]) == 3
    ratios = sorted(m / i for m, i in zip(res["samples_per_s_floor"], res["samples_per_s_independent"]))
    assert abs(res["pair_floor_vs_independent_median"] - ratios[1]) < 1e-9
    ratios = sorted(m / i for m, i in zip(res["samples_per_s_2"], res["samples_per_s_floor"]))
    assert abs(res["pair_vs_floor_median"] - ratios[1]) < 1e-9
    assert "independent ranks (same job, no communication)" in r.stdout
    assert "ranks in lockstep (a barrier per step, no gradients exchanged)" in r.stdout
    assert "ranks averaging by hand (one mpi4py Allreduce of the flat gradients per step)" in r.stdout
