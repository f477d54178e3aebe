"""The device transports (ddl_runtime.transports.gpu) on CPU: what needs no GPU is tested here.

The choice of transport from every rank's GPU identity and DDL_GPU_TRANSPORT, the pinned pool's
reuse, the NCCL-path code through a gloo group with 2 real MPI ranks, the host-staging logic
through the CPU engine, and the device checks that raise the same line on every rank.
benchmarks/gpu_checks.sh runs the CUDA side on a machine with a GPU.
"""
import pytest
import torch

from ddl_runtime.engine.buffers import TensorRef
from ddl_runtime.errors import DDLError, DDLInputError, DDLMismatchError
from ddl_runtime.transports.gpu.devices import GpuIdentity, device_problem, shared_gpus
from ddl_runtime.transports.gpu.host import HostCopies, PinnedPool, Staging, cpu_allocator
from ddl_runtime.transports.gpu.transport import decide

A, B = GpuIdentity("GPU-aaaa", 0, "H100"), GpuIdentity("GPU-bbbb", 0, "H100")


def test_each_rank_owning_its_gpu_gets_nccl_and_a_shared_gpu_gets_host_staging():
    # two ranks that both see their GPU as cuda:0 (CUDA_VISIBLE_DEVICES per rank) but on different GPUs
    assert decide(["", ""], [A, B]).name == "nccl"
    # the same index on both ranks and the same UUID: one GPU, shared
    chosen = decide(["", "", ""], [A, A, B])
    assert chosen.name == "host" and "ranks 0,1 share GPU GPU-aaaa" in chosen.reason
    assert shared_gpus([A, None, A, B, B]) == {"GPU-aaaa": [0, 2], "GPU-bbbb": [3, 4]}


def test_forced_transport_and_its_errors_are_decided_from_every_ranks_setting():
    assert decide(["host", "host"], [A, B]).name == "host"
    assert decide(["NCCL", "nccl"], [A, B]).name == "nccl"
    assert decide(["host", "host"], [A, A]).name == "host"
    with pytest.raises(DDLError, match=r"DDL_GPU_TRANSPORT=nccl, but ranks 0,1 share GPU GPU-aaaa: NCCL cannot"):
        decide(["nccl", "nccl"], [A, A])
    with pytest.raises(DDLMismatchError, match=r"ranks disagree about DDL_GPU_TRANSPORT \(rank 0: nccl; rank 1: unset\)"):
        decide(["nccl", ""], [A, B])
    with pytest.raises(DDLInputError, match=r"DDL_GPU_TRANSPORT='gpu' \(rank 1\) must be one of nccl, ipc, host"):
        decide(["", "gpu"], [A, B])


def _ref(name, device="cuda", index=0):
    return TensorRef(None, name, "float32", (4,), None, "torch", device, index=index)


def test_device_problems_name_the_tensor_in_one_line():
    assert device_problem([_ref("w"), _ref("v")], 0) is None
    assert device_problem([_ref("w", "cpu", None)], None) is None
    assert device_problem([_ref("w.grad")], None) == "tensor 'w.grad' is on cuda:0 but this rank has no GPU"
    assert "tensor 'w.grad' is on cuda:1 but this rank's GPU is cuda:0" in device_problem([_ref("w.grad", index=1)], 0)
    mixed = device_problem([_ref("a", "cpu", None), _ref("b")], 0)
    assert "'a' on cpu, 'b' on cuda:0" in mixed and "\n" not in mixed


def test_pinned_pool_reuses_buffers_by_dtype_and_length():
    made = []

    def allocate(n, dtype):
        made.append((n, dtype))
        return torch.empty(n, dtype=dtype)

    pool = PinnedPool(allocate, keep=2)
    a = pool.take(10, torch.float32)
    pool.give(a)
    assert pool.take(10, torch.float32) is a  # reused, not made again
    b = pool.take(10, torch.float32)  # a is out: a second one is made
    assert b is not a and len(made) == 2
    pool.give(a), pool.give(b)
    c = pool.take(10, torch.float16)  # another dtype: its own buffer
    assert c.dtype == torch.float16 and len(made) == 3
    pool.give(c)
    pool.give(pool.take(3, torch.float32))  # a third key: the least recently used key goes
    again = pool.take(10, torch.float32)
    assert again is not a and again is not b and len(made) == 5


def test_staging_copies_out_reduces_on_the_host_and_copies_back_reusing_the_pool():
    staging = Staging(PinnedPool(cpu_allocator), HostCopies())
    seen = []

    def reduce_host(hosts):
        seen.append([h.data_ptr() for h in hosts])
        for h in hosts:
            h.mul_(2)  # stands for the reduction across ranks

    for step in range(3):
        ts = [torch.full((2, 3), float(step)), torch.arange(4, dtype=torch.int64)]
        staging.allreduce(ts, reduce_host)
        assert torch.equal(ts[0], torch.full((2, 3), 2.0 * step)) and torch.equal(ts[1], torch.arange(4) * 2)
    assert staging.pool.allocations == 2 and seen[0] == seen[1] == seen[2]  # the same host memory each step
    src = torch.ones(3, 2)
    out = staging.allgather(src, lambda h: torch.cat([h, h * 5]))
    assert torch.equal(out, torch.cat([torch.ones(3, 2), torch.full((3, 2), 5.0)]))


def test_nccl_path_through_gloo_host_staging_and_agreed_device_errors_with_two_ranks(run_mpi):
    result = run_mpi(2, "gpu_transport_job.py", timeout=180)
    ranks = result.summary(2)
    for rank in ranks:
        errs = rank["errors"]
        for label in ("no-gpu", "other-gpu", "mixed-group", "every-rank-no-gpu"):
            got = errs[label]
            assert got is not None and got["type"] == "DDLInputError", f"rank {rank['rank']} {label}: {got}"
            assert "\n" not in got["error"]
        assert "rank 1: tensor 'w.grad' is on cuda:0 but this rank has no GPU" in errs["no-gpu"]["error"]
        assert "rank 1: tensor 'w.grad' is on cuda:1 but this rank's GPU is cuda:0" in errs["other-gpu"]["error"]
        assert "'a' on cpu, 'w.grad' on cuda:0" in errs["mixed-group"]["error"]
        assert f"rank {rank['rank']}: tensor 'w.grad'" in errs["every-rank-no-gpu"]["error"]
        assert errs["disagree"]["type"] == "DDLMismatchError"
        assert "rank 0: nccl; rank 1: host" in errs["disagree"]["error"]
        assert errs["bad-value"]["type"] == "DDLInputError" and "DDL_GPU_TRANSPORT='gpu' (rank 1)" in errs["bad-value"]["error"]
        assert errs["forced-host"] == {"type": None, "error": "host: DDL_GPU_TRANSPORT=host"}
    # the same line on both ranks where one rank was wrong
    for label in ("no-gpu", "other-gpu", "mixed-group", "disagree", "bad-value"):
        assert ranks[0]["errors"][label] == ranks[1]["errors"][label], label



def test_host_transport_async_allreduce_returns_before_its_copy_and_overlaps_with_the_callers_work(run_mpi):
    """allreduce_n_async on the host transport (issue 38, item 2), CPU tensors through the CUDA route
    with copies held back as a GPU still computing holds them: the call returns at once, the result
    is the reduction of what the tensors held when the copy ran, several calls in flight are right
    in any wait order and bit-equal to the synchronous staging; an unwaited call ends at finalize."""
    ranks = run_mpi(2, "staged_overlap_job.py", timeout=120).summary(2)
    assert all(rank["returned_s"] < 1.0 for rank in ranks)


def test_host_transport_async_allreduce_without_shared_memory_stages_synchronously(run_mpi):
    run_mpi(2, "staged_overlap_job.py", "sync", env={"DDL_SHM": "0"}, timeout=120).summary(2)


def test_a_failed_staged_reduction_ends_the_job_naming_the_rank_instead_of_hanging(run_mpi):
    result = run_mpi(2, "staged_overlap_job.py", "fault", timeout=120)
    result.assert_ended_early("rank 1/2: allreduce_n_async['fault1.0']: the staged reduction failed on this rank: "
                              "RuntimeError: device-to-host copy failed (injected); aborting the job", "UNREACHED")
    assert "Traceback" not in result.stderr


def test_horovod_negotiated_allreduce_reduces_tensors_where_they_lie_through_the_process_group(run_mpi):
    """horovod.torch's NCCL route (CUDA tensors, NCCL transport) run on CPU tensors through gloo:
    negotiated order first (ranks submit in opposite orders), then each fused group reduced on
    the tensors' device, no host copy; in place, pre/postscale, a joined rank's zeros."""
    run_mpi(2, "gpu_negotiated_job.py", timeout=180).summary(2)


def test_horovod_torch_stages_through_the_pinned_pool_with_async_handles_holding_their_buffers(run_mpi):
    """horovod.torch's route for CUDA tensors on the host transport (the runtime's host staging),
    run on CPU tensors with 2 real ranks: every collective right, async handles in flight at once
    each on their own buffers, and a second round of the same calls reuses the pool's buffers."""
    ranks = run_mpi(2, "hvd_staged_job.py", timeout=180).summary(2)
    assert all(rank["allocations"] > 0 for rank in ranks)


@pytest.mark.parametrize("ranks", [2, 3])
def test_horovod_device_route_moves_and_reduces_through_the_process_group_as_the_host_path_does(run_mpi, ranks):
    """horovod.torch on the NCCL transport (issue 41), run on CPU tensors through gloo: allgather (first
    dims differ, grouped, async), broadcast (in place or not), alltoall (splits), reducescatter (uneven,
    scaled, grouped), allreduce, on the global set and a process set, with a joined rank, in the dtypes
    Horovod's test_torch.py uses; each equal to the host path's result, and the device route the one
    that ran (its nccl_ops / nccl calls counted) when the transport is NCCL."""
    ranks_out = run_mpi(ranks, "hvd_device_route_job.py", timeout=300).summary(ranks)
    for rank in ranks_out:
        for kind in ("allgather_start", "broadcast_start", "alltoall_start", "reducescatter_start",
                     "allreduce_start"):
            assert rank["calls"].get(kind), (rank["rank"], kind, rank["calls"])


def test_host_staged_allgather_and_alltoall_outputs_are_pinned_pool_memory(run_mpi):
    """Host-staged allgather and alltoall (ranks sharing a GPU) receive into the staging's pool
    (pinned where CUDA is present; a CPU stand-in here), given back once copied onto the device."""
    run_mpi(2, "hvd_device_route_job.py", "pinned", timeout=180).summary(2)


def test_nccl_ops_at_one_rank_fuse_a_group_of_mixed_dtypes_and_keep_views_aligned():
    """gpu/nccl_ops.py in this process, on a one-rank gloo group (a GPU check's single rank runs the
    same): a fused allgather whose float64 part follows 3 int8 bytes in the buffer comes back as a
    proper float64 tensor; broadcast into a non-contiguous tensor; alltoall and reducescatter."""
    from ddl_runtime.transports.gpu import nccl_ops
    dist = torch.distributed
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        group = dist.group.WORLD
        ts = [torch.arange(3, dtype=torch.int8), torch.arange(4, dtype=torch.float64).reshape(2, 2),
              torch.tensor([True, False]), torch.zeros(0, 3, dtype=torch.int16)]
        outs = nccl_ops.allgather_start(group, ts, [[3], [2], [2], [0]], 0).wait()
        for got, want in zip(outs, ts):
            assert got.dtype == want.dtype and torch.equal(got, want)
        t = torch.arange(6, dtype=torch.float32).reshape(2, 3).t()
        nccl_ops.broadcast_start(group, [t], 0).wait()
        assert torch.equal(t, torch.arange(6, dtype=torch.float32).reshape(2, 3).t())
        (moved,) = nccl_ops.alltoall_start(group, torch.arange(4, dtype=torch.int16), [4], [4]).wait()
        assert torch.equal(moved, torch.arange(4, dtype=torch.int16))
        (part,) = nccl_ops.reducescatter_start(group, [torch.ones(3, 2)], [[3]], 0).wait()
        assert torch.equal(part, torch.ones(3, 2))
    finally:
        dist.destroy_process_group()
