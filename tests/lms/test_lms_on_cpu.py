"""LMS where no GPU is (issue 53): a bad budget or a model that is not one is refused here, not
first on the cluster; stats say LMS is off rather than a profiling step count of 0."""
from __future__ import annotations

import pytest
import torch

import ddl_runtime.lms as lms
from ddl_runtime.lms.session import LmsError


@pytest.mark.parametrize("budget, says", [(-1, "expected bytes > 0"), (1.5, "a fraction must be in (0, 1]"),
                                          ("big", "expected bytes (an int > 0) or a fraction")])
def test_bad_budget_refused_on_cpu(budget, says):
    with pytest.raises(LmsError, match=says.replace("(", r"\(").replace(")", r"\)").replace("]", r"\]")):
        lms.enable(torch.nn.Linear(2, 2), budget=budget)


def test_not_a_model_is_one_line():
    with pytest.raises(LmsError, match=r"^lms.enable: 42 is not a torch model \(an nn.Module\)$"):
        lms.enable(42)


def test_stats_of_a_cpu_model_say_lms_is_off():
    model = torch.nn.Linear(3, 3)
    lms.enable(model)
    try:
        for _ in range(3):
            model(torch.randn(2, 3)).sum().backward()
        text = str(lms.stats(model))
        assert text == "LMS is off for this model: it is not on a GPU, so there is nothing to move"
        assert str(lms.stats(torch.nn.Linear(1, 1))) == "LMS is off for this model"
    finally:
        lms.disable(model)
