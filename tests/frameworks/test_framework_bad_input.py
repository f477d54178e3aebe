"""Ranks that disagree get one clear DDLError naming the parameter, on every rank, never a hang."""
from fw_helpers import WORKERS, run

TORCH_CASES = {
    "shape": ["fc1.weight", "(16, 8)", "(12, 8)"],
    "missing_param": ["extra.weight", "rank 1"],
    "param_groups": ["param group", "rank 0: 1, rank 1: 2"],
    "group_lr": ["param_groups[0].lr", "0.1", "0.2"],
    "optimizer_state_groups": ["param group", "rank 0: 1, rank 1: 2"],
    "none_grad_shared": ["gradient is None on some ranks only", "extra."],
    "none_grad": ["gradient is None on some ranks only", "extra."],  # last: left uncaught
}
TORCH_INPUT_CASES = {"bucket_view_not_bool": ["gradient_as_bucket_view='yes'", "True or False"]}


def test_torch_mismatches_raise_naming_the_parameter():
    # One job runs every case; the last one's error is left uncaught, so the job must also
    # end (the runtime aborts it) with a non-zero status, not hang.
    r = run(2, WORKERS / "bad_input.py", *TORCH_INPUT_CASES, *TORCH_CASES, "--uncaught", timeout=150)
    cases = r.cases()
    for name, needles in TORCH_INPUT_CASES.items():  # bad arguments: an input error, same shape
        assert cases.get(name, "").startswith("DDLInputError: "), f"{name}: {cases.get(name)}\n{r.output}"
        assert all(needle in cases[name] for needle in needles), cases[name]
    for name, needles in TORCH_CASES.items():
        assert name in cases, f"case {name} printed nothing\n{r.output}"
        message = cases[name]
        assert message.startswith("DDLMismatchError: "), f"{name}: {message}"
        for needle in needles:
            assert needle in message, f"{name}: {needle!r} not in {message!r}"
    assert r.returncode != 0, r.output
    last = list(TORCH_CASES)[-1]
    assert TORCH_CASES[last][0] in r.stderr, r.output  # the uncaught error reached stderr
