"""Horovod-torch glue checks, run on real ranks under ``ddlrun --horovod -n N``.

Imports Horovod's way (``import horovod.torch as hvd``: the shim must resolve it), runs every
case named on the command line (all by default) and prints one line per case and rank:
``RESULT <case> ok`` or ``RESULT <case> FAIL <why>``.  Cases communicate, so a case that
fails on one rank only may desynchronize the rest: each case raises symmetric errors only.
"""
import copy
import importlib
import json
import os
import sys
import traceback
import warnings

import torch
import torch.nn.functional as F

import horovod.torch as hvd
import ddl_runtime.horovod.torch as _real

CASES = {}


def case(fn):
    CASES[fn.__name__] = fn
    return fn


def check(cond, message):
    if not cond:
        raise AssertionError(message)


def same_everywhere(tensors, what):
    """Every rank holds bit-identical values."""
    mine = [t.detach().clone() for t in tensors]
    for r, theirs in enumerate(hvd.allgather_object(mine)):
        for a, b in zip(mine, theirs):
            check(torch.equal(a, b), f"{what} differs between this rank and rank {r}")


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(5, 4)
        self.fc2 = torch.nn.Linear(4, 3)
        self.fc3 = torch.nn.Linear(3, 3)

    def forward(self, x):
        h = self.fc2(F.relu(self.fc1(x)))
        return h, self.fc3(F.relu(h))


def setup(seed=0):
    torch.manual_seed(1234)
    model = Net()
    torch.manual_seed(seed * 100 + hvd.rank())  # data differs by rank
    x, y = torch.randn(8, 5), torch.randn(8, 3)
    return model, x, y


def loss_of(model, x, y, use_fc3=True):
    h, out = model(x)
    return F.mse_loss(out if use_fc3 else h, y)


def local_grads(model, batches, use_fc3=True):
    """Gradients of a copy of `model` summed over `batches`, no communication."""
    twin = copy.deepcopy(model)
    for x, y in batches:
        loss_of(twin, x, y, use_fc3).backward()
    return {n: (p.grad.clone() if p.grad is not None else torch.zeros_like(p)) for n, p in twin.named_parameters()}


def reduced(grads, op="avg"):
    everyone = hvd.allgather_object(grads)
    out = {}
    for n in grads:
        total = sum(g[n] for g in everyone)
        out[n] = total / hvd.size() if op == "avg" else total
    return out


def expect_grads(model, expected, what, atol=1e-6):
    for n, p in model.named_parameters():
        check(p.grad is not None, f"{what}: {n} has no gradient")
        g = p.grad.to_dense() if p.grad.is_sparse else p.grad
        check(torch.allclose(g, expected[n], atol=atol, rtol=1e-5),
              f"{what}: {n} gradient {g.flatten()[:3].tolist()} != expected {expected[n].flatten()[:3].tolist()}")


@case
def shim_is_the_runtime():
    check(hvd is _real, "horovod.torch is not ddl_runtime.horovod.torch")
    check(type(hvd.DistributedOptimizer(torch.optim.SGD(Net().parameters(), lr=0.1))).__name__ == "SGD",
          "the distributed optimizer's class is not named like the wrapped one")


def run_average(op_name, **kwargs):
    model, x, y = setup()
    expected = reduced(local_grads(model, [(x, y)]), "sum" if op_name == "sum" else "avg")
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=1.0),
                                   named_parameters=model.named_parameters(), **kwargs)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    loss_of(model, x, y).backward()
    opt.step()
    expect_grads(model, expected, op_name)
    for n, p in model.named_parameters():
        check(torch.allclose(p, before[n] - expected[n], atol=1e-6), f"{op_name}: step did not use the reduced {n}")
    same_everywhere(list(model.parameters()), f"{op_name}: parameters")


@case
def average():
    run_average("avg")


@case
def sum_op():
    run_average("sum", op=hvd.Sum)


@case
def predivide_factor():
    run_average("avg", gradient_predivide_factor=4.0)


@case
def groups():
    model, x, y = setup()
    expected = reduced(local_grads(model, [(x, y)]))
    for spec in ("list", 2):
        m = copy.deepcopy(model)
        groups = [[m.fc1.weight, m.fc3.bias], [m.fc2.weight, m.fc2.bias]] if spec == "list" else spec
        opt = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1), named_parameters=m.named_parameters(),
                                       groups=groups)
        # a list: each group one reduction, every other parameter one of its own; a number: that many
        check(len(opt._ddl_buckets) == (4 if spec == "list" else 2), f"groups={spec}: {len(opt._ddl_buckets)} buckets")
        loss_of(m, x, y).backward()
        opt.synchronize()
        expect_grads(m, expected, f"groups={spec}")
    with warnings.catch_warnings(record=True) as caught:  # the deprecated spelling of groups=2
        warnings.simplefilter("always")
        opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), num_groups=2)
    check(len(opt._ddl_buckets) == 2 and any("num_groups" in str(w.message) for w in caught),
          f"num_groups=2: {len(opt._ddl_buckets)} buckets, warnings {[str(w.message) for w in caught]}")


@case
def fp16_compression():
    model, x, y = setup()
    grads = local_grads(model, [(x, y)])
    rounded = {n: g.half().float() for n, g in grads.items()}
    expected = {n: (v).half().float() for n, v in reduced(rounded).items()}
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters(), compression=hvd.Compression.fp16)
    loss_of(model, x, y).backward()
    opt.synchronize()
    for n, p in model.named_parameters():
        check(p.grad.dtype == torch.float32, f"fp16: {n} gradient came back as {p.grad.dtype}")
        check(torch.equal(p.grad, p.grad.half().float()), f"fp16: {n} gradient was not rounded to float16")
    expect_grads(model, expected, "fp16", atol=2e-3)
    with opt.skip_synchronize():
        opt.step()
    same_everywhere(list(model.parameters()), "fp16: parameters")


@case
def custom_compressor():
    """Horovod's documented interface: a Compressor subclass is used as compression=; one that
    leaves out decompress() fails with a TypeError naming it, on every rank, before any data moves."""
    Compressor = importlib.import_module(hvd.__name__ + ".compression").Compressor  # horovod.torch.compression

    class Halve(Compressor):  # sends half the value, doubles it back
        @staticmethod
        def compress(tensor):
            return tensor * 0.5, None

        @staticmethod
        def decompress(tensor, ctx):
            return tensor * 2.0

    t = torch.full((4,), float(hvd.rank() + 1))
    got = hvd.allreduce(t, op=hvd.Sum, compression=Halve)
    check(torch.allclose(got, torch.full((4,), float(sum(range(1, hvd.size() + 1))))), f"custom compressor: {got}")

    class Incomplete(Compressor):
        @staticmethod
        def compress(tensor):
            return tensor, None
    try:
        hvd.allreduce(t, op=hvd.Sum, compression=Incomplete)
        check(False, "a compressor without decompress() was accepted")
    except TypeError as exc:
        check("decompress()" in str(exc), f"incomplete compressor: {exc}")


@case
def backward_passes_per_step():
    model, x, y = setup()
    x2, y2 = x.flip(0) * 0.5, y.flip(0)
    expected = reduced(local_grads(model, [(x, y), (x2, y2)]))
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters(), backward_passes_per_step=2)
    loss_of(model, x, y).backward()
    loss_of(model, x2, y2).backward()
    opt.step()
    expect_grads(model, expected, "backward_passes_per_step=2")
    opt.zero_grad()
    for _ in range(2):
        loss_of(model, x, y).backward()
    try:
        loss_of(model, x, y).backward()
    except Exception as exc:  # noqa: BLE001 - the third pass must be refused on every rank
        check("backward_passes_per_step=2" in str(exc), f"unexpected error: {exc}")
    else:
        raise AssertionError("a third backward pass before step() was accepted")
    opt.synchronize()


@case
def force_allreduce_unused_parameter():
    model, x, y = setup()
    use_fc3 = hvd.rank() != 0  # rank 0 never touches fc3
    expected = reduced(local_grads(model, [(x, y)], use_fc3))
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=1.0),
                                   named_parameters=model.named_parameters())
    loss_of(model, x, y, use_fc3).backward()
    opt.step()
    expect_grads(model, expected, "unused on rank 0")
    same_everywhere(list(model.parameters()), "unused on rank 0: parameters")


@case
def synchronize_clip_skip():
    model, x, y = setup()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    loss_of(model, x, y).backward()
    opt.synchronize()
    before = model.fc1.weight.grad.norm().item()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1e-3)
    check(model.fc1.weight.grad.norm().item() < before, "clipping after synchronize() changed nothing")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with opt.skip_synchronize():
            opt.step()
    check(not caught, f"step() inside skip_synchronize() warned: {[str(w.message) for w in caught]}")
    same_everywhere(list(model.parameters()), "clipped step: parameters")
    opt.zero_grad()
    loss_of(model, x, y).backward()
    opt.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        opt.step()
    check(len(caught) == 1 and "without optimizer.skip_synchronize()" in str(caught[0].message),
          f"step() after synchronize() gave {[str(w.message) for w in caught]}")


@case
def zero_grad_in_flight():
    model, x, y = setup()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    loss_of(model, x, y).backward()
    try:
        opt.zero_grad()
    except Exception as exc:  # noqa: BLE001
        check("before optimizer.step() or optimizer.synchronize()" in str(exc), f"unexpected error: {exc}")
    else:
        raise AssertionError("zero_grad() with reductions in flight was accepted")
    opt.synchronize()
    opt.zero_grad()


@case
def bad_arguments():
    model = Net()
    for kwargs, words in ((dict(op=hvd.Min), "op=3 is not supported"),
                          (dict(op=hvd.Adasum, gradient_predivide_factor=2.0), "gradient_predivide_factor"),
                          (dict(op=hvd.Sum, gradient_predivide_factor=2.0), "gradient_predivide_factor"),
                          (dict(named_parameters=list(model.named_parameters())[:2]), "named_parameters"),
                          (dict(named_parameters=[("w", p) for p in model.parameters()]), "'w' twice"),
                          (dict(groups=[[torch.zeros(1)]]), "groups[0]")):
        try:
            hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), **kwargs)
        except ValueError as exc:
            check(words in str(exc), f"{kwargs}: message {exc!s} lacks {words!r}")
        else:
            raise AssertionError(f"DistributedOptimizer({kwargs}) was accepted")


@case
def parameter_names_without_named_parameters():
    model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Linear(3, 3))
    opt = hvd.DistributedOptimizer(torch.optim.SGD([{"params": model[0].parameters()},
                                                    {"params": model[1].parameters()}], lr=0.1))
    names = sorted(opt._parameter_names.values())
    check(len(names) == len(set(names)) == 4, f"parameter names {names}")
    check(all(n == names for n in hvd.allgather_object(names)), "ranks name the parameters differently")


@case
def sparse_gradients():
    for sparse_as_dense in (False, True):
        torch.manual_seed(7)
        emb = torch.nn.Embedding(10, 3, sparse=True)
        idx = torch.tensor([[1, 2, 4, 5], [4, 3, 2, 9]]) if hvd.rank() == 0 else torch.tensor([[1, 3, 4], [4, 7, 9]])
        twin = copy.deepcopy(emb)
        twin(idx).pow(2).sum().backward()
        expected = reduced({"weight": twin.weight.grad.to_dense()})
        opt = hvd.DistributedOptimizer(torch.optim.SparseAdam(list(emb.parameters()), lr=0.1),
                                       named_parameters=emb.named_parameters(), sparse_as_dense=sparse_as_dense)
        emb(idx).pow(2).sum().backward()
        opt.synchronize()
        check(emb.weight.grad.is_sparse, f"sparse_as_dense={sparse_as_dense}: gradient is no longer sparse")
        expect_grads(emb, expected, f"sparse_as_dense={sparse_as_dense}")
        with opt.skip_synchronize():
            opt.step()
        same_everywhere([emb.weight], f"sparse_as_dense={sparse_as_dense}: embedding")


@case
def flat_buckets_match_the_per_tensor_path():
    """The job's small float buckets reduce as one flat array (copied straight into the
    shared-memory arena on one host); a compressor or a process set keeps the per-tensor path.
    Either way every gradient comes back with the same bits as the per-tensor path gives
    (DDL_FLAT_BUCKETS=0), for every op, the predivide factor, a gradient unused on rank 0 and
    three steps in a row."""
    def grads_after(flat, use_fc3, **kwargs):
        os.environ["DDL_FLAT_BUCKETS"] = "1" if flat else "0"
        try:
            model, x, y = setup(seed=3)
            opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                           named_parameters=model.named_parameters(), **kwargs)
        finally:
            os.environ.pop("DDL_FLAT_BUCKETS")
        taken = [b.flat is not None for b in opt._ddl_buckets]
        out = []
        for step in range(3):
            opt.zero_grad()
            loss_of(model, x * (step + 1), y, use_fc3 or step == 2).backward()
            opt.step()
            out.append({n: p.grad.clone() for n, p in model.named_parameters()})
        return taken, out

    for kwargs in ({}, {"op": hvd.Sum}, {"gradient_predivide_factor": 4.0}):
        for use_fc3 in (True, hvd.rank() != 0):
            what = f"{kwargs or 'average'}, fc3 used on rank 0: {use_fc3}"
            taken, flat = grads_after(True, use_fc3, **kwargs)
            check(taken and all(taken), f"{what}: buckets not flat: {taken}")
            plain_taken, plain = grads_after(False, use_fc3, **kwargs)
            check(not any(plain_taken), f"{what}: DDL_FLAT_BUCKETS=0 still flattened")
            for step, (a, b) in enumerate(zip(flat, plain)):
                for n in a:
                    check(torch.equal(a[n], b[n]), f"{what}, step {step}: {n} differs from the per-tensor path")
    for kwargs in ({"compression": hvd.Compression.fp16}, {"process_set": hvd.global_process_set}):
        model, _, _ = setup()
        opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                       named_parameters=model.named_parameters(), **kwargs)
        flat = [b.flat is not None for b in opt._ddl_buckets]
        expected = "compression" not in kwargs  # the global set is the whole job
        check(all(flat) if expected else not any(flat), f"{kwargs}: flat buckets {flat}")


@case
def broadcast_functions():
    torch.manual_seed(hvd.rank())  # different starting points
    model = Net()
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    same_everywhere(list(model.state_dict().values()), "broadcast_parameters")
    opt = torch.optim.Adam(model.parameters(), lr=0.01 * (hvd.rank() + 1), betas=(0.8, 0.9 - 0.1 * hvd.rank()))
    if hvd.rank() == 0:  # only the root has state (as after loading a checkpoint)
        loss_of(model, torch.ones(2, 5), torch.zeros(2, 3)).backward()
        opt.step()
    # options may differ between ranks until the broadcast (Horovod allows it)
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    check(opt.param_groups[0]["lr"] == 0.01 and opt.param_groups[0]["betas"] == (0.8, 0.9),
          f"options not the root's: {opt.param_groups[0]['lr']}, {opt.param_groups[0]['betas']}")
    state = [v for s in opt.state_dict()["state"].values() for v in s.values() if torch.is_tensor(v)]
    check(len(state) == 3 * 6, f"{len(state)} state tensors")
    same_everywhere(state, "broadcast_optimizer_state")
    fresh_model = Net()
    fresh = torch.optim.SGD(fresh_model.parameters(), lr=0.1, momentum=0.9)
    hvd.broadcast_optimizer_state(fresh, root_rank=0)  # a new optimizer: zero gradients, as in Horovod
    check(all(p.grad is not None and not p.grad.any() for p in fresh_model.parameters()),
          "a new optimizer's parameters did not get zero gradients")
    obj = hvd.broadcast_object({"epoch": 3, "from": hvd.rank()} if hvd.rank() == 1 else None, root_rank=1)
    check(obj == {"epoch": 3, "from": 1}, f"broadcast_object gave {obj}")
    got = hvd.allgather_object({"rank": hvd.rank(), "extra": [0] * hvd.rank()})
    check(got == [{"rank": r, "extra": [0] * r} for r in range(hvd.size())], f"allgather_object gave {got}")


@case
def sync_batch_norm():
    torch.manual_seed(3)
    rows = [r + 2 for r in range(hvd.size())]  # batches of different sizes
    full = torch.randn(sum(rows), 4, 3, dtype=torch.float64)
    coef = torch.randn_like(full)
    start = sum(rows[:hvd.rank()])
    mine = slice(start, start + rows[hvd.rank()])
    bn = torch.nn.BatchNorm1d(4).double()
    sbn = hvd.SyncBatchNorm(4).double()
    with torch.no_grad():
        bn.weight.uniform_(0.5, 1.5), bn.bias.uniform_(-0.5, 0.5)
        sbn.weight.copy_(bn.weight), sbn.bias.copy_(bn.bias)
    x_full = full.clone().requires_grad_()
    x_mine = full[mine].clone().requires_grad_()
    out_full, out_mine = bn(x_full), sbn(x_mine)
    check(torch.allclose(out_mine, out_full[mine], atol=1e-10), "forward differs from BatchNorm on the global batch")
    check(torch.allclose(sbn.running_mean, bn.running_mean) and torch.allclose(sbn.running_var, bn.running_var),
          "running statistics differ")
    (out_full * coef).sum().backward()
    (out_mine * coef[mine]).sum().backward()
    check(torch.allclose(x_mine.grad, x_full.grad[mine], atol=1e-10), "input gradient differs")
    for name in ("weight", "bias"):
        total = hvd.allreduce(getattr(sbn, name).grad, op=hvd.Sum, name=f"bn.{name}")
        check(torch.allclose(total, getattr(bn, name).grad, atol=1e-10), f"{name} gradient (summed) differs")
    sbn.eval(), bn.eval()
    check(torch.allclose(sbn(x_mine.detach()), bn(x_mine.detach())), "eval mode is not plain BatchNorm")


@case
def dynamic_timeline():
    path = os.path.join(os.environ["TIMELINE_DIR"], "dynamic.json")
    hvd.start_timeline(path)
    hvd.allreduce(torch.ones(3), name="timeline_probe")
    model, x, y = setup()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), named_parameters=model.named_parameters())
    loss_of(model, x, y).backward()
    opt.step()
    hvd.stop_timeline()
    hvd.allreduce(torch.ones(3), name="after_stop")
    mine = path if hvd.rank() == 0 else path.replace(".json", f".rank{hvd.rank()}.json")
    with open(mine) as fh:
        events = json.load(fh)  # strict JSON once stopped
    names = {e.get("name") for e in events}
    check("ALLREDUCE" in names, f"no ALLREDUCE event in {mine}: {sorted(n for n in names if n)[:12]}")
    check(not any("after_stop" in json.dumps(e) for e in events), "events recorded after stop_timeline()")


@case
def process_set_optimizer():
    if hvd.size() < 2:
        return
    solo = hvd.add_process_set([0])  # rank 0 alone; the others outside
    model, x, y = setup()
    expected = local_grads(model, [(x, y)])
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters(), process_set=solo)
    # a set smaller than the job reduces on its own communicator: never through the flat buckets,
    # whose FlatAllreduce spans the whole job
    check(not any(b.flat is not None for b in opt._ddl_buckets), "process set [0]: a bucket is flat")
    loss_of(model, x, y).backward()
    opt.step()
    expect_grads(model, expected, "process set [0]: local gradients")
    hvd.remove_process_set(solo)


@case
def models_that_differ_between_ranks():
    model = torch.nn.Linear(3, 2 + hvd.rank())  # rank 1's layer is wider
    try:
        hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), named_parameters=model.named_parameters())
    except Exception as exc:  # noqa: BLE001 - must be raised on every rank, naming the parameter and ranks
        check("'weight'" in str(exc) and "rank 0" in str(exc) and "rank 1" in str(exc), f"message: {exc}")
    else:
        raise AssertionError("different models on different ranks were accepted")


def main():
    hvd.init()
    names = sys.argv[1:] or list(CASES)
    for name in names:
        try:
            CASES[name]()
            print(f"RESULT {name} ok", flush=True)
        except Exception as exc:  # noqa: BLE001 - reported per case
            detail = f"{type(exc).__name__}: {exc}".replace("\n", " ")[:600]
            traceback.print_exc()
            print(f"RESULT {name} FAIL {detail}", flush=True)
        hvd.barrier()


if __name__ == "__main__":
    main()
