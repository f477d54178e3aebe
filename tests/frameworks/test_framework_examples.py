"""The digits examples train to >= 95 % test accuracy, 1 rank and 2 ranks, and end in sync."""
import pytest

from fw_helpers import EXAMPLES, read_json, run


@pytest.mark.parametrize("ranks", [None, 2], ids=["python", "mpiexec-n2"])
def test_train_digits(tmp_path, ranks):
    out = tmp_path / "result.json"
    ckpt = tmp_path / "model.pt"
    r = run(ranks, EXAMPLES / "train_digits.py", "--epochs", "8", "--json", str(out),
            "--checkpoint", str(ckpt), timeout=180)
    assert r.returncode == 0, r.output
    res = read_json(out)
    assert res["ranks"] == (ranks or 1)
    assert res["test_accuracy"] >= 0.95, res
    assert res["identical"] and res["max_divergence"] == 0.0
    assert ckpt.exists()
    # rank 0 alone logs: one line per epoch, and the verdict
    assert r.stdout.count("epoch   8/8") == 1, r.output
    assert f"all {ranks or 1} rank(s) hold identical parameters" in r.stdout


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
