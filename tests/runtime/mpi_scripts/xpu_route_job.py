"""The XPU route (ddl_runtime.transports.gpu.xpu) with real MPI ranks, on CPU tensors labelled xpu.

  * this torch (CPU build, no xccl): XPU tensors move through host memory and the CPU engine;
  * xccl's group as its gloo twin (family.TWINS = {"xccl": "gloo"}): the same calls through
    nccl.py's collectives on a process group opened for "xccl";
  * horovod.torch's negotiated device collectives open the runtime's group with xccl for XPU
    requests (negotiated_device.group_of), nccl for CUDA ones;
  * ranks that choose differently, and xccl asked for (DDL_GPU_TRANSPORT=nccl) where this torch
    lacks it: one line on every rank, ranks in step after.

Rank 0 prints one SUMMARY line: every rank's {"rank", "failures", "errors", "routes"}.
"""
import json
import os
from types import SimpleNamespace

import numpy as np
import torch
from mpi4py import MPI

import ddl_runtime as ddl
from ddl_runtime.collectives import negotiated_device
from ddl_runtime.engine.buffers import TensorRef
from ddl_runtime.state import runtime as _rt
from ddl_runtime.transports import gpu
from ddl_runtime.transports.gpu import family, nccl, transport

ddl.init()
rt = _rt.current()
R, N = ddl.rank(), ddl.size()
failures, errors, routes = [], {}, {}
opened = []
_open = nccl.process_group


def counted_group(rt_, backend="nccl"):
    opened.append(backend)
    return _open(rt_, backend)


nccl.process_group = counted_group


def xref(t, name):
    return TensorRef(t, name, str(t.dtype).replace("torch.", ""), tuple(t.shape), None, "torch", "xpu", index=0)


def check(label, got, want):
    if got.dtype != want.dtype or got.shape != want.shape or not torch.equal(got, want):
        failures.append(f"{label}: got {got.flatten()[:6].tolist()} {got.dtype}, want {want.flatten()[:6].tolist()}")


def run_calls(label):
    """allreduce (sum, avg, fused dtypes), bcast, allgather on xpu-labelled tensors through gpu/."""
    ts = [torch.arange(5, dtype=torch.float32) + R, torch.full((2, 3), R + 1, dtype=torch.int64)]
    refs = [xref(t, f"t{i}") for i, t in enumerate(ts)]
    gpu.allreduce_start(rt, refs, ts, "sum", [], lambda hosts: ddl.allreduce_n(hosts, op="sum")).wait()
    check(f"{label} sum f32", ts[0], torch.arange(5, dtype=torch.float32) * N + sum(range(N)))
    check(f"{label} sum i64", ts[1], torch.full((2, 3), sum(range(1, N + 1)), dtype=torch.int64))
    a = torch.full((3,), float(R))
    gpu.allreduce_start(rt, [xref(a, "a")], [a], "avg", [], lambda hosts: ddl.allreduce_n(hosts, op="avg")).wait()
    check(f"{label} avg", a, torch.full((3,), sum(range(N)) / N))
    b = [torch.full((4,), float(R)), torch.full((2,), R * 10, dtype=torch.int32)]
    gpu.bcast(rt, [xref(t, f"b{i}") for i, t in enumerate(b)], 1,
              lambda hosts: ddl.bcast_n(hosts, root=1, names=["b0", "b1"]))
    check(f"{label} bcast f32", b[0], torch.full((4,), 1.0))
    check(f"{label} bcast i32", b[1], torch.full((2,), 10, dtype=torch.int32))
    mine = torch.full((R + 1, 2), float(R))
    got = gpu.allgather(rt, xref(mine, "g"), lambda host: ddl.allgather(host, name="g"))
    check(f"{label} allgather", got, torch.cat([torch.full((r + 1, 2), float(r)) for r in range(N)]))
    chosen = rt.gpu.routes["xpu"]
    routes[label] = {"backend": chosen.backend, "family": chosen.family.name, "said": chosen.describe(),
                     "opened": sorted(set(opened))}
    opened.clear()


def in_step(label):
    after = np.full(2, float(R))
    ddl.allreduce(after, name=f"after.{label}")
    if after[0] != sum(range(N)):
        failures.append(f"{label}: the allreduce after it was wrong (ranks out of step)")


# -- this torch: no xccl, so host memory, decided from what init gathered (no communication) ---------
at_init = transport.decided_route(rt, "xpu")
if at_init is None or at_init.backend is not None:
    failures.append(f"init did not decide the XPU route (host memory): {at_init}")
run_calls("host")
# -- xccl's group as its gloo twin --------------------------------------------------------------------
family.TWINS["xccl"] = "gloo"
rt.gpu = None  # forget what init gathered: the route is gathered again at the first XPU call
run_calls("xccl-twin")
if torch.distributed.get_backend(nccl._group) != "gloo":
    failures.append("the xccl twin's group is not gloo")
# horovod.torch's negotiated device collectives take their group by the request's device
for device in ("xpu", "cuda"):
    negotiated_device.group_of(SimpleNamespace(set_id=0), device)  # the global set: the runtime's group
    routes[f"hvd-{device}"] = {"opened": list(opened)}
    opened.clear()

# -- errors agreed on every rank ----------------------------------------------------------------------
for label, setting, twins in (("disagree", "host" if R == N - 1 else "", {"xccl": "gloo"}),
                              ("xccl-missing", "nccl", {}), ("ipc", "ipc", {})):
    os.environ[transport.ENV] = setting
    family.TWINS.clear()
    family.TWINS.update(twins)
    rt.gpu = None
    try:
        transport.agree_route(rt, "xpu")
        errors[label] = None
    except Exception as exc:  # noqa: BLE001 - recorded for the test
        errors[label] = {"type": type(exc).__name__, "error": str(exc)}
    in_step(label)
os.environ.pop(transport.ENV, None)
family.TWINS.clear()

report = MPI.COMM_WORLD.gather({"rank": R, "failures": failures, "errors": errors, "routes": routes}, root=0)
if R == 0:
    print("SUMMARY " + json.dumps(report), flush=True)
ddl.finalize()
