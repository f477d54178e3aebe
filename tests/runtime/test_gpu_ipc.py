"""The ipc transport (ddl_runtime.transports.gpu.ipc): ranks that share one GPU combine in its memory.

The route choice is decided from every rank's GPU identity; the IPC group's handle exchange,
ordering and faults run through its CPU stand-in (gpu/ipc_standin.py) with real MPI ranks.
benchmarks/gpu_checks.py's `ipc` and `device-bound` checks run the CUDA backend on a GPU.
"""
import re

import pytest

from ddl_runtime.errors import DDLError
from ddl_runtime.transports.gpu.devices import GpuIdentity
from ddl_runtime.transports.gpu.transport import decide

A, B = GpuIdentity("GPU-aaaa", 0, "H100"), GpuIdentity("GPU-bbbb", 0, "H100")


def test_every_rank_on_one_gpu_gets_ipc_partial_sharing_gets_host_and_own_gpus_nccl():
    chosen = decide(["", ""], [A, A])
    assert chosen.name == "ipc" and "ranks 0,1 share GPU GPU-aaaa" in chosen.reason
    assert decide(["", "", "", ""], [A, A, A, A]).name == "ipc"
    assert decide(["", "", ""], [A, A, B]).name == "host"  # what IPC within one GPU cannot do
    assert decide(["", ""], [A, B]).name == "nccl"
    assert decide(["host", "host"], [A, A]).name == "host"  # host staging stays on request
    assert decide(["ipc", "ipc"], [A, A]).name == "ipc"


def test_ipc_forced_where_it_cannot_run_is_one_line():
    with pytest.raises(DDLError, match=r"DDL_GPU_TRANSPORT=ipc, but ranks 0,1 share GPU GPU-aaaa and not every rank"):
        decide(["ipc"] * 3, [A, A, B])
    with pytest.raises(DDLError, match=r"DDL_GPU_TRANSPORT=ipc, but the ranks own their GPUs"):
        decide(["ipc", "ipc"], [A, B])
    with pytest.raises(DDLError, match=r"NCCL cannot run two ranks .*set it to ipc or host"):
        decide(["nccl", "nccl"], [A, A])


def test_ipc_group_exchanges_handles_once_orders_by_events_and_returns_before_its_work(run_mpi):
    """3 ranks: results (five dtypes, four ops, bit-identical on every rank), calls in flight waited
    in reverse, broadcast, allgather with different first dims, one handle exchange per slot size."""
    ranks = run_mpi(3, "ipc_standin_job.py", timeout=180).summary(3)
    assert all(rank["exchanges"] == 1 for rank in ranks)


def test_a_rank_that_dies_holding_handles_is_the_others_error_not_a_hang(run_mpi):
    # -disable-auto-cleanup: Hydra leaves the other ranks running when one exits (as a rank that
    # dies need not bring the job down at once), so their own detection is what is tested
    job = run_mpi(3, "ipc_standin_job.py", "fault", timeout=90,
                  prefix=("sh", "-c", 'exec "$0" -disable-auto-cleanup "$@"'))
    faults = re.findall(r"FAULT rank \d after [0-9.]+ s: .*?cannot continue", job.stdout)  # lines may run together
    assert len(faults) == 2, job.stdout[-2000:] + job.stderr[-2000:]
    for line in faults:
        assert "rank 2 died (pid" in line and "held each other's CUDA IPC handles" in line
        assert float(line.split(" after ")[1].split(" s")[0]) < 10
    assert "NOFAULT" not in job.stdout


def test_the_runtime_takes_the_ipc_route_for_its_own_and_horovods_calls(run_mpi):
    """gpu.allreduce_start (returning before its reduction ran), bcast, allgather, horovod's negotiated
    device allreduce in its own IPC group, finalize closing both: the runtime's glue on the stand-in."""
    job = run_mpi(2, "ipc_route_job.py", timeout=180)
    ranks = job.summary(2)
    assert all(rank["groups"] == ["native", "negotiated"] for rank in ranks)
    assert "finalize left IPC groups open" not in job.stdout
