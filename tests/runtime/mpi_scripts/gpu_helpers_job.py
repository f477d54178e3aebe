"""Every public helper on CUDA tensors, on CPU through the device stand-in (2+ real MPI ranks).

device_standin.OnDevice stands for a CUDA tensor (host code cannot view it as numpy, nor pickle it
as it lies; `.cpu()` is the device-to-host copy) and the tensor collectives take the host-staged
route for it (stage_collectives: D2H, host collective, H2D).  Checked at every rank count:
ddl_runtime.torch.parameters_max_divergence, broadcast_parameters, broadcast_optimizer_state and
metric_average; horovod.torch's broadcast_parameters, broadcast_optimizer_state, broadcast_object and
allgather_object; the Checkpointer's save and restore (argv[1]: a checkpoint directory); the Keras
DistributedOptimizer's gradient averaging on the torch backend with a missing gradient.  Results
stay on the "device" and are right.  Rank 0 prints one SUMMARY line.
"""
import json
import os
import sys

os.environ.setdefault("KERAS_BACKEND", "torch")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
from mpi4py import MPI  # noqa: E402

import ddl_runtime as ddl  # noqa: E402
import ddl_runtime.torch as ddl_torch  # noqa: E402
from device_standin import is_on_device, on_device, stage_collectives  # noqa: E402

ddl.init()
R, N = ddl.rank(), ddl.size()
routes = stage_collectives(ddl)
failures = []


def attempt(label, fn):
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001 - every helper is checked, the first error per helper reported
        failures.append(f"{label}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
        return None


def check_device(label, t, want):
    if not is_on_device(t):
        failures.append(f"{label}: left the device ({type(t).__name__})")
    elif not torch.equal(t.as_subclass(torch.Tensor), want):
        failures.append(f"{label}: got {t.as_subclass(torch.Tensor).flatten()[:4].tolist()}, want {want.flatten()[:4].tolist()}")


def model():
    torch.manual_seed(R)  # different on every rank until broadcast
    net = torch.nn.Linear(3, 2)
    net.register_buffer("scale", on_device(torch.full((2,), float(R))))
    return net


# -- parameters_max_divergence: ranks differ by 0.5 a rank ------------------------------------------
params = [on_device(torch.full((4,), 0.5 * R)), on_device(torch.arange(3.0))]
got = attempt("parameters_max_divergence", lambda: ddl_torch.parameters_max_divergence(params))
if got is not None and abs(got - 0.5 * (N - 1)) > 1e-12:
    failures.append(f"parameters_max_divergence: {got}, want {0.5 * (N - 1)}")

# -- broadcast_parameters (ddl and horovod.torch) ---------------------------------------------------
ps = [on_device(torch.full((5,), float(R))), on_device(torch.full((2, 2), float(R)).to(torch.float64))]
attempt("broadcast_parameters", lambda: ddl_torch.broadcast_parameters(ps, root_rank=N - 1))
check_device("broadcast_parameters f32", ps[0], torch.full((5,), float(N - 1)))
check_device("broadcast_parameters f64", ps[1], torch.full((2, 2), float(N - 1), dtype=torch.float64))
import ddl_runtime.horovod.torch as hvd  # noqa: E402

hvd.init()
net = model()
attempt("hvd.broadcast_parameters", lambda: hvd.broadcast_parameters(net.state_dict(), root_rank=0))
check_device("hvd.broadcast_parameters buffer", net.scale, torch.zeros(2))


# -- broadcast_optimizer_state: the root's momentum (on the device) reaches every rank ---------------
def optimizer_with_device_state(rank):
    p = torch.nn.Parameter(torch.zeros(3))
    opt = torch.optim.SGD([p], lr=0.1, momentum=0.9)
    if rank == 0:
        opt.state[p]["momentum_buffer"] = on_device(torch.full((3,), 7.0))
    return p, opt


for label, fn in (("broadcast_optimizer_state", ddl_torch.broadcast_optimizer_state),
                  ("hvd.broadcast_optimizer_state", hvd.broadcast_optimizer_state)):
    p, opt = optimizer_with_device_state(R)
    attempt(label, lambda: fn(opt, root_rank=0))
    buf = opt.state.get(p, {}).get("momentum_buffer")
    if buf is None or not torch.equal(buf.as_subclass(torch.Tensor), torch.full((3,), 7.0)):
        failures.append(f"{label}: rank {R} momentum {buf}")

# -- objects and metrics ------------------------------------------------------------------------------
got = attempt("hvd.broadcast_object", lambda: hvd.broadcast_object({"step": 10 + R}, root_rank=N - 1))
if got is not None and got != {"step": 10 + N - 1}:
    failures.append(f"hvd.broadcast_object: {got}")
got = attempt("hvd.allgather_object", lambda: hvd.allgather_object(R * 2))
if got is not None and got != [r * 2 for r in range(N)]:
    failures.append(f"hvd.allgather_object: {got}")
got = attempt("metric_average", lambda: ddl_torch.metric_average(on_device(torch.tensor(float(R)))))
if got is not None and abs(got - sum(range(N)) / N) > 1e-12:
    failures.append(f"metric_average: {got}")

# -- the Checkpointer: save device state, restore it onto the device ----------------------------------
from ddl_runtime import checkpoint  # noqa: E402

checkpoint.configure(directory=sys.argv[1])
net = model()
ddl_torch.broadcast_parameters(net.state_dict(), root_rank=0)
p, opt = optimizer_with_device_state(0)
ckpt = ddl_torch.Checkpointer(net, opt)
if attempt("Checkpointer.save", lambda: ckpt.save(4)) is not None:
    fresh = model()
    fresh.scale.copy_(torch.full((2,), -1.0))
    p2, opt2 = optimizer_with_device_state(1)
    restored = ddl_torch.Checkpointer(fresh, opt2)
    step = attempt("Checkpointer.restore", restored.restore)
    if step != 5:
        failures.append(f"Checkpointer.restore: step {step}, want 5")
    check_device("Checkpointer.restore buffer", fresh.scale, torch.zeros(2))
    buf = opt2.state.get(p2, {}).get("momentum_buffer")
    if buf is None or not torch.equal(buf.as_subclass(torch.Tensor), torch.full((3,), 7.0)):
        failures.append(f"Checkpointer.restore: momentum {buf}")

# -- Keras on the torch backend: gradient averaging with a missing gradient ---------------------------
import keras  # noqa: E402

from ddl_runtime import keras as ddl_keras  # noqa: E402

variables = [keras.Variable(torch.zeros(3).numpy(), name="a"), keras.Variable(torch.zeros(2).numpy(), name="b")]
grads = [on_device(torch.full((3,), float(R + 1))), None]
out = attempt("keras gradient averaging", lambda: ddl_keras._average_gradients_torch(
    grads, variables, ["a", "b"], "avg", True))
if out is not None:
    check_device("keras averaged gradient", out[0], torch.full((3,), sum(r + 1 for r in range(N)) / N))
    if out[1] is not None:
        failures.append(f"keras: a gradient no rank has came back as {out[1]}")

if not any(route == "staged" for _, route in routes):
    failures.append("no collective took the staged route")
report = MPI.COMM_WORLD.gather({"rank": R, "failures": failures, "routes": sorted(set(routes))}, root=0)
if R == 0:
    print("SUMMARY " + json.dumps(report), flush=True)
ddl.finalize()
