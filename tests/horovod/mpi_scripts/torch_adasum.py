"""horovod.torch op=hvd.Adasum against a numpy reference of Horovod's formula (2 or 4 ranks; with any
other number of ranks: Horovod's NotImplementedError on every rank).

The reference combines the ranks' whole tensors pairwise as a tree, ((x0 + x1) + (x2 + x3)), with
a' = (1 - a.b / (2|a|^2)) a + (1 - a.b / (2|b|^2)) b per tensor (a coefficient stays 1 when its
vector's squared norm is below 1e-8), which is what Horovod's vector-halving exchanges compute.
"""
import numpy as np
import torch

import ddl_runtime.horovod.torch as hvd

from checks import done, report

hvd.init()
R, N = hvd.rank(), hvd.size()


def pair(a, b):
    a, b = a.astype(np.float64), b.astype(np.float64)
    dot, an, bn = a @ b, a @ a, b @ b
    ac = 1.0 - dot / (2 * an) if an >= 1e-8 else 1.0
    bc = 1.0 - dot / (2 * bn) if bn >= 1e-8 else 1.0
    return ac * a + bc * b


def reference(vectors):
    vs = [np.asarray(v, dtype=np.float64).reshape(-1) for v in vectors]
    while len(vs) > 1:
        vs = [pair(vs[i], vs[i + 1]) for i in range(0, len(vs), 2)]
    return vs[0]


def data(rank, n, seed, dtype=torch.float32):
    g = torch.Generator().manual_seed(1000 * seed + rank)
    return torch.randn(n, generator=g, dtype=torch.float64).to(dtype)


def close(name, got, want, rtol):
    got = got.detach().to(torch.float64).reshape(-1).numpy()
    err = float(np.max(np.abs(got - want)) / max(1e-30, float(np.max(np.abs(want)))))
    report(name, err <= rtol, f"relative error {err:.3g} > {rtol} (got {got[:4]}, want {want[:4]})")


if N & (N - 1):
    try:
        hvd.allreduce(torch.ones(4), op=hvd.Adasum, name="np2")
        report("non_power_of_two", False, "did not raise")
    except NotImplementedError as exc:
        report("non_power_of_two", "non-power of 2 ranks" in str(exc) and "\n" not in str(exc), str(exc))
    done()

# allreduce, float32 and float64 (a length no power of two divides: the halves are uneven)
for dtype, rtol in ((torch.float32, 1e-5), (torch.float64, 1e-12)):
    x = data(R, 1001, 1, dtype)
    out = hvd.allreduce(x, op=hvd.Adasum, name=f"v.{dtype}")
    close(f"allreduce_{dtype}", out, reference([data(r, 1001, 1, dtype) for r in range(N)]), rtol)
    report(f"allreduce_{dtype}_dtype", out.dtype == dtype and out.shape == x.shape, f"{out.dtype} {out.shape}")

# float16: combined in float32 arithmetic, stored as float16
x = data(R, 513, 2, torch.float16)
close("allreduce_float16", hvd.allreduce(x, op=hvd.Adasum, name="h"),
      reference([data(r, 513, 2, torch.float16).numpy() for r in range(N)]), 5e-3)

# what Adasum is for: parallel gradients average, orthogonal ones add
same = hvd.allreduce(torch.tensor([3.0, -4.0, 12.0]), op=hvd.Adasum, name="same")
report("parallel_vectors_average", torch.allclose(same, torch.tensor([3.0, -4.0, 12.0])), str(same))
basis = torch.zeros(N)
basis[R] = R + 1.0
ortho = hvd.allreduce(basis, op=hvd.Adasum, name="ortho")
report("orthogonal_vectors_add", torch.allclose(ortho, torch.arange(1.0, N + 1)), str(ortho))
zero = hvd.allreduce(torch.zeros(5) if R else torch.ones(5), op=hvd.Adasum, name="zero")
report("zero_vector_keeps_coefficient_1", torch.allclose(zero, torch.ones(5)), str(zero))

# a group: one fused exchange, coefficients per tensor (Horovod's per-layer Adasum)
shapes = [(7,), (3, 5), (2, 2, 2)]
group = [data(R, int(np.prod(s)), 3 + i).reshape(s) for i, s in enumerate(shapes)]
outs = hvd.grouped_allreduce(group, op=hvd.Adasum, name="grp")
for i, (s, o) in enumerate(zip(shapes, outs)):
    close(f"grouped_{i}", o, reference([data(r, int(np.prod(s)), 3 + i) for r in range(N)]), 1e-5)
whole = reference([torch.cat([data(r, int(np.prod(s)), 3 + i) for i, s in enumerate(shapes)]) for r in range(N)])
per_tensor = torch.cat([o.reshape(-1) for o in outs]).numpy()
report("grouped_is_per_tensor", not np.allclose(per_tensor, whole, rtol=1e-4),
       "the group was combined as one vector")

# async, in place, and the scale factors (prescale before, postscale after)
x = data(R, 64, 4)
h = hvd.allreduce_async(x, op=hvd.Adasum, name="async")
close("allreduce_async", hvd.synchronize(h), reference([data(r, 64, 4) for r in range(N)]), 1e-5)
y = data(R, 64, 5)
hvd.allreduce_(y, op=hvd.Adasum, name="inplace")
close("allreduce_in_place", y, reference([data(r, 64, 5) for r in range(N)]), 1e-5)
z = data(R, 64, 6)
scaled = hvd.allreduce(z, op=hvd.Adasum, name="scaled", prescale_factor=0.5, postscale_factor=3.0)
close("prescale_postscale", scaled, 3.0 * reference([0.5 * data(r, 64, 6).numpy() for r in range(N)]), 1e-5)
g = hvd.grouped_allreduce_async_([data(R, 9, 7), data(R, 4, 8)], op=hvd.Adasum, name="gasync")
ga, gb = hvd.synchronize(g)
want = [reference([data(r, 9, 7) for r in range(N)]), reference([data(r, 4, 8) for r in range(N)])]
close("grouped_async_in_place", torch.cat([ga, gb]), np.concatenate(want), 1e-5)

# Horovod's refusals, raised before any communication
for label, fn, exc_type, words in (
        ("int_dtype", lambda: hvd.allreduce(torch.ones(3, dtype=torch.int32), op=hvd.Adasum), ValueError,
         "op=Adasum supports float16, float32 and float64"),
        ("process_set", lambda: hvd.allreduce(torch.ones(3), op=hvd.Adasum, process_set=hvd.ProcessSet([0])),
         NotImplementedError, "Adasum does not support non-global process sets yet"),
        ("average_and_op", lambda: hvd.allreduce(torch.ones(3), average=True, op=hvd.Adasum), ValueError,
         "cannot be combined")):
    try:
        fn()
        report(f"refuses_{label}", False, "did not raise")
    except exc_type as exc:
        report(f"refuses_{label}", all(w in str(exc) for w in [words]) and "\n" not in str(exc), str(exc))

# DistributedOptimizer(op=Adasum): Horovod's delta optimizer; every parameter ends at
# start + Adasum over the ranks of what the local optimizer step would have changed.
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 2))
before = {n: p.detach().clone() for n, p in model.named_parameters()}
inp = data(R, 24, 9).reshape(4, 6)
probe = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 2))
probe.load_state_dict(model.state_dict())
probe(inp).pow(2).sum().backward()
lr = 0.1
local_delta = {n: -lr * p.grad.detach().clone() for n, p in probe.named_parameters()}
all_deltas = {n: hvd.allgather(d.reshape(1, -1), name=f"delta.{n}") for n, d in local_delta.items()}
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=lr), named_parameters=model.named_parameters(),
                               op=hvd.Adasum)
opt.zero_grad()
model(inp).pow(2).sum().backward()
opt.step()
for n, p in model.named_parameters():
    want = before[n].reshape(-1).numpy().astype(np.float64) + reference(list(all_deltas[n].numpy()))
    close(f"optimizer_{n}", p, want, 1e-5)
try:
    with opt.skip_synchronize():
        pass
    report("optimizer_skip_synchronize_refused", False, "did not raise")
except ValueError as exc:
    report("optimizer_skip_synchronize_refused", "not supported when using Adasum" in str(exc), str(exc))

# Horovod's test_delta_optimizer (test_torch.py), run on CPU tensors: two convolutions, a step, a barrier
torch.manual_seed(1)  # the same model on every rank (the test itself starts them apart)
net = torch.nn.Sequential(torch.nn.Conv2d(1, 100, 1), torch.nn.Conv2d(100, 1, 1))
delta_opt = hvd.DistributedOptimizer(torch.optim.SGD(net.parameters(), lr=0.1), named_parameters=net.named_parameters(),
                                     op=hvd.Adasum)
loss = net(torch.rand([1, 1, 100, 100])).sum()
delta_opt.zero_grad()
loss.backward()
delta_opt.step()
hvd.barrier()
flat = torch.cat([p.detach().reshape(-1) for p in net.parameters()])
everyone = hvd.allgather(flat.reshape(1, -1), name="delta_flat")
report("delta_optimizer_models_agree", all(torch.equal(everyone[0], row) for row in everyone), "ranks differ")
done()
