"""The Horovod layer's surface, without MPI jobs: imports, constants, queries."""
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=str(REPO))


def test_common_imports_neither_mpi_nor_a_framework():
    proc = _python("import sys, ddl_runtime.horovod.common as c; "
                   "print(sorted(m for m in ('mpi4py.MPI', 'torch', 'tensorflow') if m in sys.modules))")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_horovod_names_and_queries():
    import ddl_runtime.horovod.torch as hvd

    assert (hvd.Average, hvd.Sum, hvd.Adasum, hvd.Min, hvd.Max, hvd.Product) == (0, 1, 2, 3, 4, 5)
    assert hvd.mpi_built() and hvd.mpi_enabled() and not hvd.gloo_built() and not hvd.gloo_enabled()
    assert hvd.nccl_built() == 0 and not hvd.ccl_built() and not hvd.cuda_built() and not hvd.rocm_built()
    assert issubclass(hvd.HorovodInternalError, RuntimeError)
    assert hvd.global_process_set.process_set_id == 0
    for name in ("allreduce", "allreduce_", "allreduce_async", "allreduce_async_", "grouped_allreduce",
                 "grouped_allreduce_", "grouped_allreduce_async", "grouped_allreduce_async_", "allgather",
                 "allgather_async", "grouped_allgather", "broadcast", "broadcast_", "broadcast_async",
                 "broadcast_async_", "alltoall", "alltoall_async", "reducescatter", "reducescatter_async",
                 "grouped_reducescatter", "join", "barrier", "poll", "synchronize", "sparse_allreduce_async",
                 "add_process_set", "remove_process_set", "ProcessSet"):
        assert callable(getattr(hvd, name)), name


def test_single_process_job_without_a_launcher():
    """A plain `python train.py` (no mpiexec) is a job of one rank; every collective works."""
    proc = _python(
        "import torch, ddl_runtime.horovod.torch as hvd\n"
        "hvd.init()\n"
        "assert (hvd.rank(), hvd.size(), hvd.local_rank(), hvd.cross_size()) == (0, 1, 0, 1)\n"
        "assert torch.equal(hvd.allreduce(torch.ones(3)), torch.ones(3))\n"
        "assert torch.equal(hvd.allgather(torch.ones(2)), torch.ones(2))\n"
        "assert hvd.alltoall(torch.arange(3.0), torch.tensor([3], dtype=torch.int32))[1].tolist() == [3]\n"
        "assert torch.equal(hvd.reducescatter(torch.ones(4), op=hvd.Sum), torch.ones(4))\n"
        "assert hvd.join() == 0\n"
        "hvd.barrier()\n"
        "print('fine')\n")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "fine"
