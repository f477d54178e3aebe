"""Devices in horovod.torch as Horovod's GPU build treats them, checked on a CPU-only torch: the
device in the negotiated descriptor (ranks that disagree all fail), device requests left unscaled
by the engine, groups that mix devices refused at once, SyncBatchNorm's tensors on the input's
device; and the scaling a CUDA tensor gets, which is torch arithmetic in the tensor's dtype."""
import numpy as np
import torch


def test_devices_on_two_ranks(hvd_run):
    hvd_run(2, "torch_devices.py").assert_ok(2, expected_checks=14)


def test_device_is_part_of_the_descriptor_and_only_host_requests_are_scaled_by_the_engine():
    from ddl_runtime.collectives.negotiation import Request, engine_params
    host = Request("allreduce", "w", ("average", 0.5, 2.0), [("w", "float32", (3,))])
    cuda = Request("allreduce", "w", ("average", 0.5, 2.0), [("w", "float32", (3,))], device="cuda")
    assert host.descriptor() != cuda.descriptor()
    assert engine_params(host.descriptor()) == ("average", 0.5, 2.0)
    assert engine_params(cuda.descriptor()) == ("sum", 1.0, 1.0)
    adasum = Request("allreduce", "a", ("adasum", 3.0, 1.0), [("a", "float16", (3,))], device="cuda")
    assert engine_params(adasum.descriptor()) == ("adasum", 1.0, 1.0)


def test_float16_scaling_on_a_device_is_horovods_gpu_arithmetic():
    """test_torch.py's prescale test expects, on CUDA, factor.type(float16) * tensor in float16; on the
    host the engine keeps float16 in float32 arithmetic (Horovod's CPU expectation)."""
    from ddl_runtime.horovod.torch.mpi_ops import _scaled
    torch.manual_seed(1234)
    np.random.seed(1234)
    factor = np.random.uniform()
    tensor = torch.FloatTensor(17, 17).random_(-100, 100).half()
    want = torch.tensor(factor, dtype=torch.float64).half() * tensor
    assert torch.equal(_scaled(tensor, factor), want)
    host = (torch.tensor(factor, dtype=torch.float32) * tensor.float()).half()
    assert not torch.equal(want, host)  # the two builds differ: the device path must not take the host's


def test_integer_scaling_on_a_device_is_in_float64_truncated():
    from ddl_runtime.horovod.torch.mpi_ops import _scaled
    t = torch.tensor([7, -7, 3], dtype=torch.int32)
    out = _scaled(t, 0.5)
    assert out.dtype == torch.int32 and out.tolist() == [3, -3, 1]
    assert _scaled(t, 1.0) is t
