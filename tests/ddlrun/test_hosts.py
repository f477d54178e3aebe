"""Host discovery: table tests against environments recorded from each scheduler."""
from __future__ import annotations

import pytest

from wmlce_tools.ddlrun.hostlist import expand_counts, expand_hostlist
from wmlce_tools.ddlrun.hosts import (HostSet, discover_hosts, parse_host_option, read_hostfile)
from wmlce_tools.errors import WmlError


@pytest.mark.parametrize("text, hosts", [
    ("node1", ["node1"]),
    ("node1,node2", ["node1", "node2"]),
    ("nid[0001-0003,0007],gpu[01-02]", ["nid0001", "nid0002", "nid0003", "nid0007", "gpu01", "gpu02"]),
    ("c[08-11]", ["c08", "c09", "c10", "c11"]),                       # padding kept across a digit boundary
    ("n[9-11]", ["n9", "n10", "n11"]),                                 # no padding
    ("rack[1-2]-node[01-02]", ["rack1-node01", "rack1-node02", "rack2-node01", "rack2-node02"]),
    ("a[1,3]b", ["a1b", "a3b"]),                                       # suffix after the brackets
    ("x[0]", ["x0"]),
    ("login1,nid[00010-00011],gpu-a100-[1-2].cluster", [
        "login1", "nid00010", "nid00011", "gpu-a100-1.cluster", "gpu-a100-2.cluster"]),
    ("n[098-101]", ["n098", "n099", "n100", "n101"]),
])
def test_expand_hostlist(text, hosts):
    assert expand_hostlist(text) == hosts


@pytest.mark.parametrize("text, why", [
    ("", "no hosts"),
    ("nid[0001-0003", "unbalanced brackets"),
    ("nid0001]", "unbalanced brackets"),
    ("nid[3-1]", "goes backwards"),
    ("nid[a-b]", "not a number"),
    ("nid[1-2[3]]", "nested"),
    ("node1,,node2", "empty entry"),
    ("no de", "not a host name"),
    ("-n[1-2]", "'-n1' is not a host name"),
    ("n[1-200000]", "a range is too large"),
    ("n[1-2],m[1-2]", None),
])
def test_malformed_hostlist(text, why):
    if why is None:          # the control: well-formed text expands
        assert expand_hostlist(text) == ["n1", "n2", "m1", "m2"]
        return
    with pytest.raises(WmlError, match="malformed hostlist") as e:
        expand_hostlist(text)
    assert why in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("text, counts", [
    ("2(x3),1", [2, 2, 2, 1]), ("4", [4]), ("1,2,3", [1, 2, 3]), ("6(x2)", [6, 6]),
])
def test_expand_counts(text, counts):
    assert expand_counts(text) == counts


@pytest.mark.parametrize("text", ["2(x),1", "", "2,,1", "two", "2(x3"])
def test_malformed_counts(text):
    with pytest.raises(WmlError, match="N or N\\(xM\\)"):
        expand_counts(text)


# Environments as the schedulers set them inside a job (values from the centres' docs).
RECORDED = [
    pytest.param(
        {"LSB_JOBID": "701106", "LSB_MCPU_HOSTS": "batch1 1 h41n01 42 h41n02 42"},
        ("h41n01", "h41n02"), (42, 42), id="lsf-summit-mcpu-hosts"),
    pytest.param(
        {"LSB_JOBID": "7", "LSB_MCPU_HOSTS": "hostA 16 hostB 16"},
        ("hostA", "hostB"), (16, 16), id="lsf-no-launch-node"),
    pytest.param(
        {"SLURM_JOB_ID": "1234", "SLURM_JOB_NODELIST": "nid[0001-0003,0007],gpu[01-02]",
         "SLURM_TASKS_PER_NODE": "2(x3),1,4(x2)"},
        ("nid0001", "nid0002", "nid0003", "nid0007", "gpu01", "gpu02"), (2, 2, 2, 1, 4, 4), id="slurm-awkward"),
    pytest.param(
        {"SLURM_JOB_ID": "9", "SLURM_JOB_NODELIST": "c[098-100]"},
        ("c098", "c099", "c100"), (None, None, None), id="slurm-no-tasks"),
    pytest.param(
        {"SLURM_JOB_ID": "9", "SLURM_NODELIST": "cn7"}, ("cn7",), (None,), id="slurm-old-variable"),
    pytest.param(
        {"COBALT_JOBID": "42", "COBALT_PARTNAME": "3820-3823,3900", "COBALT_JOBSIZE": "5"},
        ("nid03820", "nid03821", "nid03822", "nid03823", "nid03900"), (None,) * 5, id="cobalt-partname"),
    pytest.param(
        {"COBALT_JOBID": "42", "COBALT_PARTNAME": "3820-3823", "COBALT_JOBSIZE": "2"},
        ("nid03820", "nid03821"), (None, None), id="cobalt-jobsize-limits"),
    pytest.param({}, ("localhost",), (None,), id="no-scheduler"),
]


@pytest.mark.parametrize("env, hosts, slots", RECORDED)
def test_discover_hosts(env, hosts, slots):
    hs = discover_hosts(env)
    assert hs.hosts == hosts
    assert hs.slots == slots


def test_lsf_djob_hostfile_one_line_per_slot(tmp_path):
    f = tmp_path / "hostfile"
    f.write_text("batch3\n" + "a01n05\n" * 42 + "a01n06\n" * 42)
    hs = discover_hosts({"LSB_DJOB_HOSTFILE": str(f), "LSB_MCPU_HOSTS": "ignored 1"})
    assert hs.hosts == ("a01n05", "a01n06") and hs.slots == (42, 42)
    assert "launch node batch3 left out" in hs.source


def test_cobalt_nodefile_preferred(tmp_path):
    f = tmp_path / "nodes"
    f.write_text("nid00012\nnid00013\n")
    hs = discover_hosts({"COBALT_NODEFILE": str(f), "COBALT_PARTNAME": "1-9", "COBALT_JOBSIZE": "2"})
    assert hs.hosts == ("nid00012", "nid00013")


@pytest.mark.parametrize("env, message", [
    ({"SLURM_JOB_NODELIST": "n[1-2]", "SLURM_TASKS_PER_NODE": "2(x3)"}, "gives 3 counts for the 2 hosts"),
    ({"SLURM_JOB_NODELIST": "n[1-"}, "malformed hostlist"),
    ({"LSB_MCPU_HOSTS": "h1 42 h2"}, "expected 'host count"),
    ({"COBALT_PARTNAME": "3820-3821", "COBALT_JOBSIZE": "4"}, "names 2 nodes but COBALT_JOBSIZE is 4"),
    ({"COBALT_PARTNAME": "38x0"}, "expected node ids"),
])
def test_discovery_errors(env, message):
    with pytest.raises(WmlError, match=message):
        discover_hosts(env)


@pytest.mark.parametrize("text, hosts, slots", [
    ("h1,h2", ("h1", "h2"), (None, None)),
    ("h1:4,h2:4", ("h1", "h2"), (4, 4)),
    ("h1,h1,h2", ("h1", "h2"), (2, None)),
    ("nid[01-03]", ("nid01", "nid02", "nid03"), (None, None, None)),
])
def test_host_option(text, hosts, slots):
    hs = parse_host_option(text)
    assert (hs.hosts, hs.slots) == (hosts, slots)


@pytest.mark.parametrize("text", ["h1,,h2", "h1:0", "h1:x", "bad;host"])
def test_host_option_errors(text):
    with pytest.raises(WmlError):
        parse_host_option(text)


def test_hostfile_formats(tmp_path):
    f = tmp_path / "hosts"
    f.write_text("# cluster\nnodeA slots=4\nnodeB:2\n\nnodeC   # no count\n")
    hs = read_hostfile(str(f))
    assert hs == HostSet(("nodeA", "nodeB", "nodeC"), (4, 2, None), f"hostfile {f}")


def test_hostfile_missing_empty_bad(tmp_path):
    with pytest.raises(WmlError, match="no such file"):
        read_hostfile(str(tmp_path / "nope"))
    (tmp_path / "empty").write_text("# nothing\n\n")
    with pytest.raises(WmlError, match="is empty"):
        read_hostfile(str(tmp_path / "empty"))
    (tmp_path / "bad").write_text("nodeA slots=four\n")
    with pytest.raises(WmlError, match=r"bad:1: .*expected 'host', 'host:N' or 'host slots=N'"):
        read_hostfile(str(tmp_path / "bad"))
