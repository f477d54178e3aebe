"""horovod.torch collectives against references every rank can compute itself (any number of ranks)."""
import sys
import traceback

import torch

import ddl_runtime.horovod.torch as hvd

hvd.init()
R, N = hvd.rank(), hvd.size()
failures = 0


def check(name, fn):
    global failures
    try:
        fn()
        print(f"OK {name}", flush=True)
    except Exception as exc:  # noqa: BLE001 - report and go on
        failures += 1
        msg = "".join(traceback.format_exception_only(type(exc), exc)).strip().replace("\n", " | ")
        print(f"FAIL {name} (rank {R}): {msg}", flush=True)


def data(r, shape=(3, 5), dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(1000 * seed + r)
    return (torch.rand(shape, generator=g) * 20 - 10).round().to(dtype)


def all_data(shape=(3, 5), dtype=torch.float32, seed=0):
    return torch.stack([data(r, shape, dtype, seed) for r in range(N)])


def eq(a, b):
    assert a.dtype == b.dtype, (a.dtype, b.dtype)
    assert a.shape == b.shape, (tuple(a.shape), tuple(b.shape))
    assert torch.equal(a, b), f"max diff {(a.double() - b.double()).abs().max().item()}"


def allreduce_ops():
    for dtype in (torch.int32, torch.int64, torch.float32, torch.float64, torch.float16, torch.int8, torch.uint8):
        every = torch.stack([data(r, seed=1).abs().to(dtype) if dtype == torch.uint8 else data(r, dtype=dtype, seed=1)
                             for r in range(N)])
        mine = every[R].clone()
        wide = every.double()
        assert mine.dtype == dtype
        eq(hvd.allreduce(mine, op=hvd.Sum, name=f"sum.{dtype}"), wide.sum(0).to(dtype))
        eq(hvd.allreduce(mine, op=hvd.Min), every.min(0).values)
        eq(hvd.allreduce(mine, op=hvd.Max), every.max(0).values)
        if dtype in (torch.int32, torch.int64, torch.float32, torch.float64):
            eq(hvd.allreduce(mine, op=hvd.Product), wide.prod(0).to(dtype))
        avg = hvd.allreduce(mine)  # Horovod's default op is Average
        ref = wide.sum(0) / N
        eq(avg, (ref.trunc() if not dtype.is_floating_point else ref).to(dtype))
        assert torch.equal(mine, every[R]), "allreduce changed its input"


def allreduce_scaling():
    mine = data(R, dtype=torch.float64, seed=2)
    every = all_data(dtype=torch.float64, seed=2)
    out = hvd.allreduce(mine, op=hvd.Sum, prescale_factor=0.5, postscale_factor=3.0)
    eq(out, (every * 0.5).sum(0) * 3.0)
    ints = data(R, dtype=torch.int64, seed=2)
    out = hvd.allreduce(ints, op=hvd.Sum, prescale_factor=0.5)
    eq(out, (all_data(dtype=torch.int64, seed=2).double() * 0.5).trunc().sum(0).long())
    eq(hvd.allreduce(mine, average=False), every.sum(0))  # the deprecated average= still works
    eq(hvd.allreduce(mine, average=True), every.sum(0) / N)


def allreduce_inplace_and_async():
    t = data(R, seed=3)
    same = hvd.allreduce_(t, op=hvd.Sum)
    assert same is t
    eq(t, all_data(seed=3).sum(0))
    handles = [hvd.allreduce_async(data(R, seed=10 + i), op=hvd.Sum, name=f"async.{i}") for i in range(6)]
    for i, h in enumerate(handles):
        eq(hvd.synchronize(h), all_data(seed=10 + i).sum(0))
    u = data(R, seed=4)
    h = hvd.allreduce_async_(u, op=hvd.Max)
    assert hvd.synchronize(h) is u
    eq(u, all_data(seed=4).max(0).values)
    bf = data(R, seed=5).to(torch.bfloat16)
    eq(hvd.allreduce(bf, op=hvd.Sum), all_data(seed=5).sum(0).to(torch.bfloat16))


def order_independent():
    """Ranks submit the same named tensors in opposite orders: matched by name, not by call order."""
    names = [f"order.{i}" for i in range(4)]
    todo = names if R % 2 == 0 else list(reversed(names))
    handles = {n: hvd.allreduce_async(data(R, seed=20 + names.index(n)), name=n, op=hvd.Sum) for n in todo}
    for n in names:
        eq(hvd.synchronize(handles[n]), all_data(seed=20 + names.index(n)).sum(0))


def grouped():
    ts = [data(R, (2 + i, 3), seed=30 + i) for i in range(3)] + [data(R, (4,), torch.int32, seed=33)]
    out = hvd.grouped_allreduce(ts, op=hvd.Sum)
    for i, o in enumerate(out[:3]):
        eq(o, all_data((2 + i, 3), seed=30 + i).sum(0))
    eq(out[3], all_data((4,), torch.int32, seed=33).sum(0).int())
    hvd.grouped_allreduce_(ts[:3], op=hvd.Sum)
    for i, t in enumerate(ts[:3]):
        eq(t, all_data((2 + i, 3), seed=30 + i).sum(0))
    h = hvd.grouped_allreduce_async([data(R, seed=40)], name="g")
    eq(hvd.synchronize(h)[0], all_data(seed=40).sum(0) / N)


def allgather():
    for dtype in (torch.uint8, torch.int16, torch.int64, torch.float16, torch.float64, torch.bool):
        mine = torch.full((R + 1, 2, 3), R % 2 if dtype == torch.bool else R).to(dtype)
        ref = torch.cat([torch.full((r + 1, 2, 3), r % 2 if dtype == torch.bool else r).to(dtype) for r in range(N)])
        eq(hvd.allgather(mine), ref)
    gathered = hvd.grouped_allgather([torch.full((R + 1,), float(R)), torch.full((2, 2), R)])
    eq(gathered[0], torch.cat([torch.full((r + 1,), float(r)) for r in range(N)]))
    eq(gathered[1], torch.cat([torch.full((2, 2), r) for r in range(N)]))
    eq(hvd.synchronize(hvd.allgather_async(torch.tensor(float(R)))), torch.arange(N, dtype=torch.float32))


def broadcast():
    for root in range(N):
        mine = torch.full((2, 3), R, dtype=torch.int16)
        out = hvd.broadcast(mine, root, name=f"b.{root}")
        eq(out, torch.full((2, 3), root, dtype=torch.int16))
        eq(mine, torch.full((2, 3), R, dtype=torch.int16))  # untouched
        t = torch.full((4,), float(R))
        assert hvd.broadcast_(t, root) is t
        eq(t, torch.full((4,), float(root)))
    h = hvd.broadcast_async(torch.full((3,), R), root_rank=N - 1)
    eq(hvd.synchronize(h), torch.full((3,), N - 1))


def alltoall():
    # rank R sends (d + 1) rows to rank d, each row [R, d]
    splits = torch.tensor([d + 1 for d in range(N)], dtype=torch.int32)
    rows = torch.cat([torch.tensor([[R, d]] * (d + 1)) for d in range(N)])
    out, received = hvd.alltoall(rows, splits)
    eq(received, torch.full((N,), R + 1, dtype=torch.int32))
    eq(out, torch.cat([torch.tensor([[s, R]] * (R + 1)) for s in range(N)]))
    equal = torch.arange(2 * N, dtype=torch.float64) + 100 * R
    out = hvd.alltoall(equal)
    eq(out, torch.cat([torch.arange(2 * R, 2 * R + 2, dtype=torch.float64) + 100 * s for s in range(N)]))
    out, received = hvd.synchronize(hvd.alltoall_async(rows, splits.tolist()))
    eq(received, torch.full((N,), R + 1, dtype=torch.int32))


def reducescatter():
    rows = 2 * N + 1  # uneven: the first rank takes one more row
    base, extra = divmod(rows, N)
    counts = [base + (1 if r < extra else 0) for r in range(N)]
    start = sum(counts[:R])
    mine = data(R, (rows, 3), torch.float64, seed=50)
    every = all_data((rows, 3), torch.float64, seed=50)
    eq(hvd.reducescatter(mine, op=hvd.Sum), every.sum(0)[start:start + counts[R]])
    eq(hvd.reducescatter(mine), (every.sum(0) / N)[start:start + counts[R]])
    ints = data(R, (rows,), torch.int32, seed=51)
    eq(hvd.reducescatter(ints, op=hvd.Sum, postscale_factor=2.0),
       (all_data((rows,), torch.int32, seed=51).sum(0).int() * 2)[start:start + counts[R]])
    outs = hvd.grouped_reducescatter([mine, mine * 2], op=hvd.Sum)
    eq(outs[1], (every * 2).sum(0)[start:start + counts[R]])
    eq(hvd.synchronize(hvd.reducescatter_async(mine, op=hvd.Sum)), every.sum(0)[start:start + counts[R]])


def autograd():
    x = data(R, (4, 2), torch.float64, seed=60).requires_grad_()
    hvd.allreduce(x, op=hvd.Sum).backward(torch.ones(4, 2, dtype=torch.float64))
    eq(x.grad, torch.full((4, 2), float(N), dtype=torch.float64))
    x.grad = None
    (hvd.allgather(x) * 2).sum().backward()
    eq(x.grad, torch.full((4, 2), 2.0, dtype=torch.float64))
    x.grad = None
    hvd.broadcast(x, 0).sum().backward()
    eq(x.grad, torch.full((4, 2), 1.0 if R == 0 else 0.0, dtype=torch.float64))
    y = torch.ones(N * 2, dtype=torch.float64, requires_grad=True)
    out = hvd.alltoall(y)
    (out * 3).sum().backward()
    eq(y.grad, torch.full((2 * N,), 3.0, dtype=torch.float64))
    z = torch.ones((N * 2, 2), dtype=torch.float64, requires_grad=True)
    hvd.reducescatter(z, op=hvd.Average).sum().backward()
    eq(z.grad, torch.ones((N * 2, 2), dtype=torch.float64))
    ws = [torch.ones(3, requires_grad=True), torch.ones(2, requires_grad=True)]
    sum(o.sum() for o in hvd.grouped_allreduce(ws, op=hvd.Sum)).backward()
    eq(ws[0].grad, torch.full((3,), float(N)))


def compression():
    x = torch.full((5,), 1.0 / 3.0, dtype=torch.float32) * (R + 1)
    out = hvd.allreduce(x, op=hvd.Sum, compression=hvd.Compression.fp16)
    assert out.dtype == torch.float32
    ref = sum(torch.tensor(1.0 / 3.0 * (r + 1)).half().float() for r in range(N))
    assert torch.allclose(out, ref.expand(5), rtol=1e-3), (out, ref)


def barrier_and_poll():
    h = hvd.allreduce_async(torch.ones(3), name="late")
    hvd.barrier()
    while not hvd.poll(h):
        pass
    eq(hvd.synchronize(h), torch.ones(3))


def threads():
    """Several threads of a rank submit and wait at once (autograd may run hooks off the main thread)."""
    import threading

    out, errors = {}, []

    def work(i):
        try:
            out[i] = hvd.allreduce(torch.full((3,), float(i + R)), name=f"thread.{i}", op=hvd.Sum)
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)
    workers = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(60)
    assert not errors, errors
    for i in range(4):
        eq(out[i], torch.full((3,), float(sum(i + r for r in range(N)))))


for name, fn in [("allreduce_ops", allreduce_ops), ("allreduce_scaling", allreduce_scaling),
                 ("allreduce_inplace_and_async", allreduce_inplace_and_async), ("order_independent", order_independent),
                 ("grouped", grouped), ("allgather", allgather), ("broadcast", broadcast), ("alltoall", alltoall),
                 ("reducescatter", reducescatter), ("autograd", autograd), ("compression", compression),
                 ("barrier_and_poll", barrier_and_poll), ("threads", threads)]:
    check(name, fn)
print("DONE", flush=True)
sys.exit(1 if failures else 0)
