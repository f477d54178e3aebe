"""JobEnvironment, mode strings and launcher detection: pure Python, no MPI."""
import pytest

from ddl_runtime.errors import DDLInputError
from ddl_runtime.core.jobenv import JobEnvironment, LauncherInfo, detect_launcher
from ddl_runtime.core.topology import Hierarchy, Mode, hierarchy_for, parse_mode


def test_defaults_from_an_empty_environment():
    env = JobEnvironment.from_environ({})
    assert env == JobEnvironment()
    assert env.stall_warning_s == 60.0 and env.stall_shutdown_s is None and env.launcher.name == "none"


def test_all_ddl_variables():
    env = JobEnvironment.from_environ({
        "DDL_OPTIONS": "-dbg_level 0 -mode p:6x2x1x1", "DDL_EMULATE_NODES": "2", "DDL_GPU_BINDING": "local-rank",
        "DDL_LAYOUT_GPUS": "0,1;2,3;4;5", "DDL_FUSION_MB": "8", "DDL_STALL_WARNING_S": "5",
        "DDL_STALL_SHUTDOWN_S": "30", "DDL_TIMELINE": "/tmp/t.json", "CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5"})
    assert env.mode == Mode(6, 2, 1, 1) and env.mode.world_size == 12 and str(env.mode) == "p:6x2x1x1"
    assert env.emulate_nodes == 2 and env.fusion_mb == 8.0
    assert env.layout_gpus == ((0, 1), (2, 3), (4,), (5,))
    assert (env.stall_warning_s, env.stall_shutdown_s, env.timeline) == (5.0, 30.0, "/tmp/t.json")
    assert [env.gpu_for_local_rank(i) for i in range(4)] == [0, 2, 4, 5]


@pytest.mark.parametrize("text, levels", [
    ("p:6x2x1x1", (6, 2, 1, 1)), ("p:4", (4, 1, 1, 1)), ("p:2x3", (2, 3, 1, 1)), (" p:1x2x2 ", (1, 2, 2, 1)),
])
def test_mode_strings(text, levels):
    assert parse_mode(text).levels == levels


@pytest.mark.parametrize("text", ["6x2x1x1", "p:", "p:2x", "p:2x0", "p:1x2x3x4x5", "r:4x2", "p:a"])
def test_malformed_modes(text):
    with pytest.raises(DDLInputError, match="malformed|below 1"):
        parse_mode(text)


def test_gpu_binding():
    per_rank = JobEnvironment.from_environ({"DDL_GPU_BINDING": "per-rank", "CUDA_VISIBLE_DEVICES": "3"})
    assert per_rank.gpu_for_local_rank(5) == 0
    by_local = JobEnvironment.from_environ({"DDL_GPU_BINDING": "local-rank", "CUDA_VISIBLE_DEVICES": "0,1,2"})
    assert [by_local.gpu_for_local_rank(i) for i in range(4)] == [0, 1, 2, 0]
    assert JobEnvironment.from_environ({}).gpu_for_local_rank(0) is None
    assert JobEnvironment.from_environ({"CUDA_VISIBLE_DEVICES": ""}).gpu_for_local_rank(0) is None
    with pytest.raises(DDLInputError, match="local rank 2 has none"):
        JobEnvironment.from_environ({"DDL_LAYOUT_GPUS": "0;1"}).gpu_for_local_rank(2)


@pytest.mark.parametrize("variables, expect", [
    ({"JSM_NAMESPACE_RANK": "7", "JSM_NAMESPACE_SIZE": "12", "JSM_NAMESPACE_LOCAL_RANK": "1",
      "JSM_NAMESPACE_LOCAL_SIZE": "6"}, LauncherInfo("jsrun", 7, 12, 1, 6)),
    ({"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_RANK": "1",
      "OMPI_COMM_WORLD_LOCAL_SIZE": "2"}, LauncherInfo("openmpi", 3, 4, 1, 2)),
    ({"PMI_RANK": "1", "PMI_SIZE": "2", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "2",
      "SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_STEP_ID": "0"}, LauncherInfo("hydra", 1, 2, 1, 2)),
    ({"ALPS_APP_PE": "9"}, LauncherInfo("alps", rank=9)),
    ({"SLURM_STEP_ID": "0", "SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_LOCALID": "1", "SLURM_NODEID": "2",
      "SLURM_TASKS_PER_NODE": "2(x3),1"}, LauncherInfo("slurm", 5, 8, 1, 2, 2)),
    ({"SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NODEID": "0"}, LauncherInfo("none")),  # batch script
])
def test_launcher_detection(variables, expect):
    assert detect_launcher(variables) == expect


def test_torchrun_variables():
    env = JobEnvironment.from_environ({})
    assert env.torchrun_variables(5, 8, 1, 2, 2, "n1", 29500) == {
        "RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "2",
        "MASTER_ADDR": "n1", "MASTER_PORT": "29500"}


def test_hierarchy_precedence_and_coordinates():
    assert hierarchy_for(4, parse_mode("p:2x2"), 4) == Hierarchy((2, 2, 1, 1), "mode")
    assert hierarchy_for(6, None, 3) == Hierarchy((2, 3), "emulate")
    assert hierarchy_for(4, None, None) is None
    h = Hierarchy((2, 3, 2, 1), "mode")
    assert h.active_levels == (0, 1, 2)
    assert h.coordinates(7) == (1, 0, 1, 0)
    # a level's colour groups exactly the ranks that differ only at that level
    for level in range(3):
        groups = {}
        for r in range(12):
            groups.setdefault(h.level_color(r, level), []).append(r)
        for members in groups.values():
            assert len(members) == h.sizes[level]
            coords = [list(h.coordinates(r)) for r in members]
            for c in coords:
                c[level] = None
            assert all(c == coords[0] for c in coords)
    assert (h.local_rank(7), h.cross_rank(7)) == (1, 3)
    with pytest.raises(DDLInputError, match="describes 4 ranks but the job has 6"):
        hierarchy_for(6, parse_mode("p:2x2"), None)
