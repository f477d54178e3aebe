"""Devices as Horovod's GPU build treats them, checked without a GPU (2 ranks).

* The device a rank's tensors live on is part of the negotiated descriptor: ranks that disagree
  (rank 0 "cpu", rank 1 "cuda") all fail with one mismatch line, like a dtype mismatch.  The
  requests are submitted through the very function horovod.torch submits with, from host arrays.
* A request from a device is only combined by the engine (no prescale, postscale or average):
  horovod.torch scales such tensors on their device in their own dtype.
* A group that mixes devices (here cpu and meta, the devices a CPU-only torch has) is refused at
  once, before any communication, with a RuntimeError.
* SyncBatchNorm builds every tensor on its input's device, whatever torch's default device.
"""
import time

import numpy as np
import torch

import ddl_runtime.horovod.torch as hvd
from ddl_runtime.errors import DDLMismatchError
from ddl_runtime.horovod.common.requests import submit

from checks import done, report

hvd.init()
R, N = hvd.rank(), hvd.size()
PS = hvd.global_process_set


def mismatch(kind, params, device, extra=None):
    x = np.ones(4, dtype=np.float32)
    out = np.empty(4 // N if kind == "reducescatter" else 4, dtype=np.float32)
    try:
        submit(kind, f"dev.{kind}", params, [x], [out if kind != "allgather" else None], PS, kind, extra=extra,
               device=device).wait()
        report(f"device_mismatch_{kind}", False, "did not raise")
    except DDLMismatchError as exc:
        text = str(exc)
        want = [f"{kind} 'dev.{kind}'", "device", "rank 0: cpu", "rank 1: cuda"]
        report(f"device_mismatch_{kind}", all(w in text for w in want) and "\n" not in text, text)


dev = "cpu" if R == 0 else "cuda"
mismatch("allreduce", ("sum", 1.0, 1.0), dev)
mismatch("allgather", (), dev)
mismatch("broadcast", (0,), dev)
mismatch("reducescatter", ("average", 1.0, 1.0), dev)
mismatch("alltoall", (), dev, extra=tuple([4 // N] * N))

# the engine combines a device request without scaling it; a host request with the same factors it scales
x = np.arange(6, dtype=np.float32) + R
want_sum = sum(np.arange(6, dtype=np.float32) + r for r in range(N))
for device, want in (("cuda", want_sum), ("cpu", want_sum / N * 0.5 * 3.0)):
    out = np.empty(6, dtype=np.float32)
    submit("allreduce", f"scale.{device}", ("average", 0.5, 3.0), [x], [out], PS, "allreduce", device=device).wait()
    report(f"engine_scales_only_host_{device}", np.allclose(out, want), f"{out} != {want}")
rows = np.empty(6 // N, dtype=np.float32)
submit("reducescatter", "scale.rs", ("average", 0.5, 3.0), [x], [rows], PS, "reducescatter", device="cuda").wait()
lo = R * (6 // N)
report("engine_reducescatter_device_unscaled", np.allclose(rows, want_sum[lo:lo + 6 // N]), str(rows))

# a group mixing devices: refused at once on this rank, nothing submitted
mixed = [torch.ones(3), torch.empty(3, device="meta"), torch.ones(3)]
for label, fn in (("grouped_allreduce", lambda: hvd.grouped_allreduce(mixed, op=hvd.Sum)),
                  ("grouped_allreduce_async_", lambda: hvd.grouped_allreduce_async_(mixed)),
                  ("grouped_allgather", lambda: hvd.grouped_allgather(mixed)),
                  ("grouped_reducescatter", lambda: hvd.grouped_reducescatter(mixed))):
    t0 = time.monotonic()
    try:
        fn()
        report(f"mixed_group_{label}", False, "did not raise")
    except RuntimeError as exc:
        text = str(exc)
        ok = "same device" in text and "cpu and meta" in text and "\n" not in text and time.monotonic() - t0 < 5
        report(f"mixed_group_{label}", ok, text)
# the names are free: the same call on CPU tensors works afterwards
report("after_mixed_group", torch.equal(hvd.grouped_allreduce([torch.ones(3)] * 3, op=hvd.Sum)[0],
                                        torch.full((3,), float(N))), "grouped allreduce after the refusal")

# SyncBatchNorm: its own tensors follow the input, not torch's default device
bn = hvd.SyncBatchNorm(3)
inp = (torch.randn(4, 3, 5, generator=torch.Generator().manual_seed(R)) + R).requires_grad_()
try:
    with torch.device("meta"):
        y = bn(inp)
        y.sum().backward()
    report("sync_batch_norm_input_device", y.device == inp.device and inp.grad.device == inp.device,
           f"{y.device} {inp.grad.device}")
except RuntimeError as exc:
    report("sync_batch_norm_input_device", False, str(exc).splitlines()[0])
done()
