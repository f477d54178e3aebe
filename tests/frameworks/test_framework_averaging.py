"""Gradient averaging is right: 2 ranks x batch b == 1 process x batch 2b, same start, several steps."""
import numpy as np

from fw_helpers import WORKERS, run


def test_torch_two_ranks_match_one_process_with_double_batch(tmp_path):
    out = tmp_path / "torch.npz"
    r = run(2, WORKERS / "torch_equivalence.py", "--out", str(out), "--batch", "16", "--steps", "12")
    assert r.returncode == 0, r.output
    d = np.load(out)
    assert int(d["size"]) == 2
    ref, start = d["ref"], d["start"]
    moved = np.abs(ref - start).max()
    assert moved > 1e-2, "the reference did not train: the comparison would prove nothing"
    # d: gradients in shared memory (gradient_as_bucket_view), reduced where they lie every step
    assert d["d_in_heap"].all() and bool(d["d_same_grads"]) and int(d["d_buckets"]) > 1
    for variant in ("a", "b", "d"):  # a: default buckets; b: 5 small buckets + 2 backward passes per step
        own = d[variant]
        assert np.array_equal(own[0], own[1]), f"variant {variant}: ranks hold different parameters"
        diff = np.abs(own[0] - ref).max()
        assert diff < 1e-5 * max(1.0, np.abs(ref).max()), f"variant {variant}: differs from 1 process by {diff}"
    assert int(d["buckets_b"]) > 1, "variant b was meant to use several buckets"
    # a and b reduce their small CPU buckets as one flat tensor each; e (flat buckets off, a
    # tensor at a time) does the same arithmetic, so it matches a bit for bit
    assert bool(d["flat_a"]) and not bool(d["flat_e"])
    assert np.array_equal(d["e"], d["a"]), "flat buckets changed the averaged gradients"
    # The negative control (op='sum' doubles the gradient): the comparison is sensitive to it.
    assert np.abs(d["c"][0] - ref).max() > 100 * np.abs(d["a"][0] - ref).max() + 1e-4


def test_keras_fit_two_ranks_match_one_process_with_double_batch(tmp_path):
    out = tmp_path / "keras.npz"
    # The same job then runs the Keras bad-input cases (one launch instead of two: Keras is slow
    # to import); they are checked below.
    r = run(2, WORKERS / "keras_equivalence.py", "--out", str(out), "--batch", "16", "--steps", "10",
            "--then-bad-cases", "weight_shape", "steps", timeout=180)
    assert r.returncode == 0, r.output
    d = np.load(out)
    own, ref, start = d["own"], d["ref"], d["start"]
    assert np.abs(ref - start).max() > 1e-2, "the reference did not train"
    assert np.array_equal(own[0], own[1]), "ranks hold different weights after model.fit"
    diff = np.abs(own[0] - ref).max()
    assert diff < 1e-5 * max(1.0, np.abs(ref).max()), f"2 ranks differ from 1 process by {diff}"
    # DDLCallback averaged the epoch metrics: every rank's History holds the same numbers.
    losses = d["losses"]
    assert np.array_equal(losses[0], losses[1]), losses

    # Keras misuse: a clear DDLError naming the variable / the step counts, on every rank.
    cases = r.cases()
    assert "hidden/kernel" in cases.get("weight_shape", ""), r.output
    assert "(4, 8)" in cases["weight_shape"] and "(4, 6)" in cases["weight_shape"]
    assert "steps per epoch" in cases.get("steps", ""), r.output
    assert "rank 0: 4, rank 1: 3" in cases["steps"]
