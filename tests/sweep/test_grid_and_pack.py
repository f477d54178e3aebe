"""The sweep's grid (--param, --params-file, --seeds, {name}) and the packing bookkeeping:
pure functions, no job."""
from __future__ import annotations

import pytest

from wmlce_tools.errors import WmlError
from wmlce_tools.sweeps.grid import build_trials, check_program, substitute
from wmlce_tools.sweeps.pack import Allocation, Need, Slots, check_fits, per_allocation


def test_grid_is_every_combination_first_name_slowest():
    trials = build_trials(["lr=0.1,0.01", "bs=32,64,128"])
    assert [t.values for t in trials] == [
        {"lr": "0.1", "bs": "32"}, {"lr": "0.1", "bs": "64"}, {"lr": "0.1", "bs": "128"},
        {"lr": "0.01", "bs": "32"}, {"lr": "0.01", "bs": "64"}, {"lr": "0.01", "bs": "128"}]
    assert [t.index for t in trials] == list(range(6))
    assert trials[4].env() == {"WML_TRIAL": "4", "WML_PARAM_LR": "0.01", "WML_PARAM_BS": "64"}


def test_seeds_repeat_each_trial(tmp_path):
    trials = build_trials(["lr=1,2"], seeds=3)
    assert [(t.values["lr"], t.values["seed"]) for t in trials] == [
        ("1", "0"), ("1", "1"), ("1", "2"), ("2", "0"), ("2", "1"), ("2", "2")]


def test_yaml_grid_yaml_rows_and_csv_rows(tmp_path):
    (tmp_path / "g.yaml").write_text("lr: [0.1, 0.2]\nopt: adam\n")
    assert [t.values for t in build_trials(params_file=str(tmp_path / "g.yaml"))] == [
        {"lr": "0.1", "opt": "adam"}, {"lr": "0.2", "opt": "adam"}]
    (tmp_path / "rows.yaml").write_text("- {lr: 0.1, bs: 8}\n- {lr: 0.3, bs: 16}\n")
    assert [t.values for t in build_trials(["wd=0,1"], str(tmp_path / "rows.yaml"))] == [
        {"lr": "0.1", "bs": "8", "wd": "0"}, {"lr": "0.1", "bs": "8", "wd": "1"},
        {"lr": "0.3", "bs": "16", "wd": "0"}, {"lr": "0.3", "bs": "16", "wd": "1"}]
    (tmp_path / "t.csv").write_text("lr,bs\n0.1,8\n0.2,16\n")
    assert [t.values for t in build_trials(params_file=str(tmp_path / "t.csv"))] == [
        {"lr": "0.1", "bs": "8"}, {"lr": "0.2", "bs": "16"}]


@pytest.mark.parametrize("params, seeds, fragment", [
    ([], None, "empty sweep"),
    (["lr"], None, "expected NAME=V1,V2"),
    (["lr=0.1,"], None, "every value must be non-empty"),
    (["1lr=3"], None, "parameter name '1lr'"),
    (["lr=1", "lr=2"], None, "given twice"),
    (["seed=1"], 2, "already has"),
    (["lr=1"], 0, "--seeds must be"),
])
def test_bad_grids_are_one_line(params, seeds, fragment):
    with pytest.raises(WmlError, match=fragment):
        build_trials(params, seeds=seeds)


def test_placeholders_checked_and_substituted():
    trials = build_trials(["lr=0.1,0.2"])
    check_program(["train.py", "--lr", "{lr}", "--json", "{{}}"], trials)
    with pytest.raises(WmlError, match=r"names \{bs\} but trial 0 has no parameter 'bs' \(parameters: lr\)"):
        check_program(["train.py", "--bs", "{bs}"], trials)
    with pytest.raises(WmlError, match="not a parameter name"):
        check_program(["train.py", "{0}"], trials)
    assert substitute(["t.py", "--lr={lr}", "{{x}}"], {"lr": "0.2"}) == ["t.py", "--lr=0.2", "{x}"]


def test_one_gpu_trials_get_one_gpu_each_not_a_node():
    alloc = Allocation(nodes=2, gpus_per_node=4, cores_per_node=32)
    need = Need(nodes=1, gpus=1, cores=8, whole=False)
    assert per_allocation(need, alloc) == 8
    slots = Slots(alloc)
    placed = [slots.take(i, need) for i in range(9)]
    assert placed[8] is None                       # all 8 GPUs busy
    held = sorted((p.nodes[0], p.gpus[0]) for p in placed[:8])
    assert held == [(n, g) for n in range(2) for g in range(4)]
    slots.release(5)                               # one ends: the next starts on its GPU
    again = slots.take(8, need)
    assert (again.nodes, again.gpus) == (placed[5].nodes, placed[5].gpus)


def test_whole_node_trials_and_one_that_cannot_fit():
    alloc = Allocation(nodes=3, gpus_per_node=4, cores_per_node=32)
    two_nodes = Need(nodes=2, gpus=4, cores=32, whole=True)
    assert check_fits(two_nodes, alloc, "the allocation") == 1
    slots = Slots(alloc)
    assert slots.take(0, two_nodes).nodes == (0, 1) and slots.take(1, two_nodes) is None
    with pytest.raises(WmlError, match="a trial needs 4 nodes but the allocation has 3: give --pack 4"):
        check_fits(Need(4, 4, 32, True), alloc, "the allocation")
    with pytest.raises(WmlError, match="needs 8 GPU"):
        check_fits(Need(1, 8, 1, False), alloc, "the allocation")


def test_packed_trials_of_one_job_get_different_master_ports():
    from wmlce_tools.ddlrun.plan import master_port

    job = {"SLURM_JOB_ID": "7"}
    ports = {master_port({**job, "WML_TRIAL": str(t)}) for t in range(8)}
    assert len(ports) == 8 and master_port(job) == master_port({**job, "WML_TRIAL": ""})
