"""Device families (ddl_runtime.transports.gpu.family, xpu.py): which backend each device's tensors take.

No XPU or ROCm hardware is here: the choice is a pure function of what torch was built with
(TorchBuild), tested with the builds each family ships; this torch (a CPU build) gives the real
answers for itself; the XPU route's code runs with 2 real MPI ranks on CPU tensors labelled xpu,
through host memory (this torch has no xccl) and through xccl's gloo twin.
"""
import pytest
import torch

from ddl_runtime.engine.buffers import TensorRef
from ddl_runtime.errors import DDLError, DDLInputError
from ddl_runtime.transports.gpu.devices import device_problem
from ddl_runtime.transports.gpu import family, nccl
from ddl_runtime.transports.gpu.family import TorchBuild, family_of, missing_backend, route

CUDA = TorchBuild("2.13.0+cu128", None, frozenset({"gloo", "nccl", "mpi"}))
ROCM = TorchBuild("2.13.0+rocm6.4", "6.4.43482", frozenset({"gloo", "nccl"}))
XPU = TorchBuild("2.13.0+xpu", None, frozenset({"gloo", "xccl"}))
CPU = TorchBuild("2.13.0+cpu", None, frozenset({"gloo"}))


def test_each_family_takes_its_backend_rocm_the_nccl_path_as_rccl_and_xpu_xccl():
    chosen = route("cuda", CUDA)
    assert (chosen.family.name, chosen.backend, chosen.family.library) == ("cuda", "nccl", "NCCL")
    chosen = route("cuda", ROCM)  # torch's HIP build: ROCm tensors are "cuda", its nccl backend is RCCL
    assert (chosen.family.name, chosen.backend, chosen.family.library) == ("rocm", "nccl", "RCCL")
    chosen = route("xpu", XPU)
    assert (chosen.family.name, chosen.backend, chosen.family.library) == ("xpu", "xccl", "oneCCL")
    assert route("cpu", CPU).backend == "gloo"
    assert route("xpu", XPU, "host").backend is None  # DDL_GPU_TRANSPORT=host: host memory even with xccl
    assert family_of("cuda", ROCM).device == family_of("cuda", CUDA).device == "cuda"


def test_xpu_without_xccl_takes_host_memory_and_says_what_to_install():
    chosen = route("xpu", CPU)
    assert chosen.backend is None and chosen.family.name == "xpu"
    assert "torch 2.13.0+cpu has no 'xccl' backend" in chosen.reason
    assert "https://download.pytorch.org/whl/xpu" in chosen.describe() and chosen.describe().startswith(
        "xpu tensors: host memory")


def test_a_backend_asked_for_and_missing_is_one_line_naming_what_to_install():
    with pytest.raises(DDLError) as err:  # DDL_GPU_TRANSPORT=nccl: the family's library, required
        route("xpu", CPU, "nccl")
    text = str(err.value)
    assert text.startswith("torch 2.13.0+cpu has no torch.distributed 'xccl' backend, which xpu tensors need (oneCCL)")
    assert "pip install torch --index-url https://download.pytorch.org/whl/xpu" in text and "\n" not in text
    with pytest.raises(DDLError, match=r"'nccl' backend, which rocm tensors need \(RCCL\); install a ROCm build"):
        route("cuda", TorchBuild("2.13.0+rocm6.4", "6.4", frozenset({"gloo"})))
    with pytest.raises(DDLError, match=r"'nccl' backend, which cuda tensors need \(NCCL\); install a CUDA build"):
        route("cuda", CPU)
    with pytest.raises(DDLInputError, match=r"DDL_GPU_TRANSPORT=ipc is CUDA IPC; xpu tensors take nccl"):
        route("xpu", XPU, "ipc")
    with pytest.raises(DDLInputError, match=r"device 'mps' is not supported"):
        route("mps", CPU)


def test_xpu_tensors_are_taken_by_the_collectives_and_a_mixed_group_is_one_line():
    def ref(name, device, index):
        return TensorRef(None, name, "float32", (4,), None, "torch", device, index=index)
    assert device_problem([ref("w", "xpu", 0), ref("v", "xpu", 0)], None) is None  # no CUDA GPU: XPU still taken
    mixed = device_problem([ref("a", "cpu", None), ref("w", "xpu", 0)], None)
    assert "'a' on cpu, 'w' on xpu:0" in mixed and "\n" not in mixed
    assert "only cpu, cuda, xpu tensors are supported" in device_problem([ref("m", "mps", 0)], None)


def test_this_torch_reports_its_own_build_and_refuses_a_group_it_cannot_open_in_one_line():
    build = TorchBuild.of(torch)
    assert build.version == torch.__version__ and "gloo" in build.backends
    assert build.hip == torch.version.hip
    assert ("xccl" in build.backends) == torch.distributed.is_backend_available("xccl")
    if "xccl" not in build.backends:  # this CI's CPU torch: the real refusal, before any communication
        with pytest.raises(DDLError) as err:
            nccl.process_group(None, "xccl")
        assert str(err.value) == missing_backend("xccl", build) and "whl/xpu" in str(err.value)
    family.TWINS["xccl"] = "gloo"
    try:
        assert TorchBuild.of(torch).has("xccl")  # the twin opens xccl's group as gloo
    finally:
        family.TWINS.clear()


def test_xpu_route_moves_tensors_through_host_memory_or_xccls_gloo_twin_with_two_ranks(run_mpi):
    ranks = run_mpi(2, "xpu_route_job.py", timeout=180).summary(2)
    for rank in ranks:
        host, twin = rank["routes"]["host"], rank["routes"]["xccl-twin"]
        assert (host["backend"], host["opened"]) == (None, [])  # no process group: host memory
        assert host["said"].startswith("xpu tensors: host memory: torch ") and "whl/xpu" in host["said"]
        assert (twin["backend"], twin["opened"]) == ("xccl", ["xccl"])
        assert rank["routes"]["hvd-xpu"]["opened"] == ["xccl"] and rank["routes"]["hvd-cuda"]["opened"] == ["nccl"]
        errs = rank["errors"]
        assert errs["disagree"]["type"] == "DDLMismatchError"
        assert "ranks disagree about how xpu tensors move (rank 0: xccl; rank 1: host memory)" in errs["disagree"]["error"]
        assert errs["xccl-missing"]["type"] == "DDLError"
        assert errs["xccl-missing"]["error"].startswith("rank 0: torch ") and "'xccl' backend" in errs["xccl-missing"]["error"]
        assert errs["ipc"]["type"] == "DDLInputError"
        for label in ("disagree", "xccl-missing", "ipc"):
            assert "\n" not in errs[label]["error"]
    for label in ("disagree", "xccl-missing", "ipc"):
        assert ranks[0]["errors"][label] == ranks[1]["errors"][label], label
