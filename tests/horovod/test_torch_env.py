"""HOROVOD_* settings: the mapping onto DDL_* (no MPI), and a real 2-rank job under them."""
import json
import re

import pytest

from ddl_runtime.errors import DDLInputError
from ddl_runtime.horovod import environment
from torch_glue_helpers import PROGRAMS, ddlrun


def test_mapping_onto_ddl_settings():
    s = environment.read({"HOROVOD_FUSION_THRESHOLD": str(32 * 2**20), "HOROVOD_STALL_CHECK_TIME_SECONDS": "7",
                          "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS": "90", "HOROVOD_TIMELINE": "/tmp/t.json",
                          "HOROVOD_CACHE_CAPACITY": "0"})
    assert dict(s.ddl) == {"DDL_FUSION_MB": "32", "DDL_STALL_WARNING_S": "7", "DDL_STALL_SHUTDOWN_S": "90",
                           "DDL_RESPONSE_CACHE": "0"}
    assert s.timeline == "/tmp/t.json" and not s.dynamic_timeline and s.notices == ()


def test_zero_values_and_switches():
    s = environment.read({"HOROVOD_FUSION_THRESHOLD": "0", "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS": "0",
                          "HOROVOD_STALL_CHECK_DISABLE": "1", "HOROVOD_TIMELINE": "DYNAMIC"})
    assert dict(s.ddl) == {"DDL_FUSION_MB": "0", "DDL_STALL_WARNING_S": "86400"}  # 0 = fusion off; shutdown never
    assert s.dynamic_timeline and s.timeline is None


def test_explicit_ddl_setting_wins_with_a_notice():
    s = environment.read({"HOROVOD_FUSION_THRESHOLD": str(2**20), "DDL_FUSION_MB": "8",
                          "HOROVOD_TIMELINE": "h.json", "DDL_TIMELINE": "d.json"})
    assert s.ddl == () and s.timeline is None
    assert any("DDL_FUSION_MB=8 is set" in n for n in s.notices)
    assert any("HOROVOD_TIMELINE=h.json ignored" in n for n in s.notices)


def test_unknown_and_unsupported_settings_get_one_notice_each():
    s = environment.read({"HOROVOD_CYCLE_TIME": "5", "HOROVOD_HIERARCHICAL_ALLREDUCE": "1", "HOROVOD_FOO": "x",
                          "HOROVOD_WITH_PYTORCH": "1", "HOROVOD_GPU_OPERATIONS": "NCCL", "HOROVOD_RANK": "0"})
    assert len(s.notices) == 3
    assert any(n.startswith("HOROVOD_CYCLE_TIME=5 has no effect") for n in s.notices)
    assert any(n.startswith("HOROVOD_HIERARCHICAL_ALLREDUCE=1 has no effect") for n in s.notices)
    assert any(n.startswith("HOROVOD_FOO=x is not a setting wml knows") for n in s.notices)


@pytest.mark.parametrize("name,value", [("HOROVOD_FUSION_THRESHOLD", "64MB"), ("HOROVOD_FUSION_THRESHOLD", "-1"),
                                        ("HOROVOD_STALL_CHECK_TIME_SECONDS", "0"),
                                        ("HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "inf"),
                                        ("HOROVOD_CACHE_CAPACITY", "-1"), ("HOROVOD_CACHE_CAPACITY", "1.5")])
def test_bad_values_name_the_variable(name, value):
    with pytest.raises(DDLInputError, match=name):
        environment.read({name: value})


def test_apply_sets_ddl_variables():
    env = {"HOROVOD_STALL_CHECK_TIME_SECONDS": "3"}
    environment.apply(env)
    assert env["DDL_STALL_WARNING_S"] == "3"


def test_job_honours_horovod_settings_and_writes_the_timeline(tmp_path):
    trace = tmp_path / "trace.json"
    job = ddlrun(["--horovod", "-n", "2", "python", str(PROGRAMS / "torch_env_probe.py")],
                 env={"HOROVOD_TIMELINE": str(trace), "HOROVOD_FUSION_THRESHOLD": str(2**20),
                      "HOROVOD_STALL_CHECK_TIME_SECONDS": "7", "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS": "50",
                      "HOROVOD_CYCLE_TIME": "2", "HOROVOD_FOO": "1", "HOROVOD_WITH_PYTORCH": "1",
                      "DDL_STALL_SHUTDOWN_S": None})
    assert job.returncode == 0, job.output
    settings = [json.loads(m) for m in re.findall(r"^\[\d\] SETTINGS (.*)$", job.stdout, re.M)]
    assert settings == [{"fusion_bytes": 2**20, "stall_warning_s": 7.0, "stall_shutdown_s": 50.0}] * 2
    # one notice line per setting, from rank 0 only; build-time switches are silent
    assert job.stderr.count("HOROVOD_CYCLE_TIME=2 has no effect") == 1, job.output
    assert job.stderr.count("HOROVOD_FOO=1 is not a setting wml knows") == 1, job.output
    assert "HOROVOD_WITH_PYTORCH" not in job.stderr
    # rank 0 writes the file named (strict JSON after a normal exit); rank 1 beside it
    for path in (trace, tmp_path / "trace.rank1.json"):
        events = json.loads(path.read_text())
        reductions = [e for e in events if e.get("name") == "ALLREDUCE" and e.get("ph") == "X"]
        assert reductions and all(e["args"]["bytes"] > 0 for e in reductions), path
        # Horovod's layout: wml's own detail in row 0 (named after the rank), a row per tensor after it
        header = next(e for e in events if e.get("name") == "process_name" and e["pid"] == 0)
        assert header["args"]["name"] == ("rank 0" if path == trace else "rank 1"), header
