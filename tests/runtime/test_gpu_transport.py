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
