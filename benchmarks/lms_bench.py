"""Large Model Support (issue 42): prints each "Done when" line, measured on one GPU.

    python benchmarks/lms_bench.py                 # on a GPU machine (ResNet-152, fp32, 224x224, SGD+momentum)
    python benchmarks/lms_bench.py --only overhead,equal
    python benchmarks/lms_bench.py --cpu           # a small smoke run of the same code on CPU (CI)

The 16 GiB budget is a cap (``torch.cuda.set_per_process_memory_fraction``), as a V100-sized
card on a larger one.  Each configuration runs in a process of its own (a fresh allocator; an
out-of-memory ends only that run); the 2-rank line runs under mpiexec with both ranks on GPU 0.
Lines: ``DONE-WHEN <name>: <figures>; target <...>: PASS|FAIL``, and one ``RESULT {json}``
per line for scripts.  With ``--cpu`` host copies stand in for the device
(``DDL_LMS_STANDIN_BYTES``), the model is a small ResNet and no figure is a GPU figure: it only
shows that every path of this script still runs.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lms_models import gpt, resnet  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
GiB = 1 << 30
SECTIONS = ("throughput", "largest", "overhead", "equal", "wmlce", "ranks")

GPU = dict(layers=(3, 8, 36, 3), width=64, image=224, cap=16 * GiB, batch=256, small=64, steps=10, warmup=3,
           search=(64, 16), ranks_batch=128, equal_steps=20)
CPU = dict(layers=(1, 1, 1, 1), width=4, image=32, cap=(5 << 20) // 2, batch=16, small=4, steps=2, warmup=2,
           search=(4, 4), ranks_batch=8, equal_steps=4)

WMLCE_SCRIPT = """\
import sys, time, torch
sys.path.insert(0, {here!r})
from lms_models import resnet
torch.cuda.set_enabled_lms(True)                 # the only LMS line of a WML CE script
cfg = {cfg!r}
dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
if dev.type == "cuda":
    torch.cuda.set_per_process_memory_fraction(cfg["cap"] / torch.cuda.get_device_properties(0).total_memory)
model = resnet(cfg["layers"], cfg["width"]).to(dev)
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
x = torch.randn(cfg["batch"], 3, cfg["image"], cfg["image"], device=dev)
y = torch.randint(0, 1000, (cfg["batch"],), device=dev)
for _ in range(3):
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
print("TRAINED", float(loss), flush=True)
"""


# -- one configuration, in its own process --------------------------------------------------------
def worker(spec: dict) -> dict:
    import torch

    import ddl_runtime.lms as lms

    cfg, cpu = spec["cfg"], spec["cpu"]
    dev = torch.device("cpu" if cpu else "cuda")
    if spec.get("deterministic"):
        torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False
    else:
        torch.backends.cudnn.benchmark = True
    if spec["capped"] and not cpu:
        torch.cuda.set_per_process_memory_fraction(cfg["cap"] / torch.cuda.get_device_properties(0).total_memory)
    torch.manual_seed(0)
    model = resnet(cfg["layers"], cfg["width"]).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    if spec["lms"]:
        lms.enable(model, budget=cfg["cap"] if cpu else 0, optimizer=opt)
    g = torch.Generator(device=dev).manual_seed(1)
    batch = spec["batch"]
    x = torch.randn(batch, 3, cfg["image"], cfg["image"], device=dev, generator=g)
    y = torch.randint(0, 1000, (batch,), device=dev, generator=g)
    sync = (lambda: None) if cpu else torch.cuda.synchronize

    def step():
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    out = {"batch": batch, "lms": spec["lms"], "capped": spec["capped"]}
    try:
        for _ in range(spec["warmup"]):
            step()
        sync()
        t0 = time.perf_counter()
        for _ in range(spec["steps"]):
            loss = step()
        sync()
        dt = (time.perf_counter() - t0) / max(1, spec["steps"])
    except torch.OutOfMemoryError as e:
        return {**out, "oom": True, "error": str(e).splitlines()[0][:300]}
    out.update(oom=False, ms_per_step=dt * 1e3, images_per_s=batch / dt, loss=float(loss),
               peak_bytes=0 if cpu else torch.cuda.max_memory_allocated())
    if spec["lms"]:
        out["stats"] = str(lms.stats(model))
    if spec.get("save"):
        torch.save({k: v.detach().cpu() for k, v in model.state_dict().items()}, spec["save"])
    return out


def run_worker(spec: dict, timeout: float = 300) -> dict:
    env = dict(os.environ)
    if spec["cpu"] and spec["lms"]:
        env["DDL_LMS_STANDIN_BYTES"] = str(spec["cfg"]["cap"])
    try:
        proc = subprocess.run([sys.executable, __file__, "--worker", json.dumps(spec)], capture_output=True,
                              text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"batch": spec["batch"], "oom": True, "error": f"no end within {timeout:g} s"}
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("WORKER "):
            return json.loads(line[len("WORKER "):])
    return {"batch": spec["batch"], "oom": True,
            "error": f"exit {proc.returncode}: {(proc.stderr.strip().splitlines() or ['?'])[-1][:300]}"}


# -- the Done-when lines --------------------------------------------------------------------------
def say(name: str, text: str, ok, data: dict) -> None:
    verdict = "n/a" if ok is None else ("PASS" if ok else "FAIL")
    print(f"DONE-WHEN {name}: {text}: {verdict}", flush=True)
    print("RESULT " + json.dumps({"line": name, "verdict": verdict, **data}), flush=True)
    if ok is not None:  # gpu_checks.sh's table (benchmarks/_checks.py)
        from _checks import check

        figure, _, limit = text.partition("; target ")
        check(f"lms {name}", figure[:34], limit[:18] or "-", ok)


def spec(ctx, batch, lms, capped, **kw):
    return {"cfg": ctx["cfg"], "cpu": ctx["cpu"], "batch": batch, "lms": lms, "capped": capped,
            "steps": ctx["cfg"]["steps"], "warmup": ctx["cfg"]["warmup"], **kw}


def throughput(ctx):
    b = ctx["cfg"]["batch"]
    base = run_worker(spec(ctx, b, False, False))
    with_lms = run_worker(spec(ctx, b, True, True))
    if base.get("oom") or with_lms.get("oom"):
        say("throughput", f"batch {b}: uncapped {base.get('error', 'ran')}; LMS capped {with_lms.get('error', 'ran')}",
            False, {"base": base, "lms": with_lms})
        return
    r = with_lms["images_per_s"] / base["images_per_s"]
    say("throughput", f"batch {b} with LMS in {ctx['cap_text']}: {with_lms['images_per_s']:.0f} images/s = {r:.3f}x "
        f"of batch {b} uncapped without LMS ({base['images_per_s']:.0f} images/s); target >= 0.70",
        None if ctx["cpu"] else r >= 0.70, {"ratio": r, "base": base, "lms": with_lms})


def largest(ctx):
    start, step = ctx["cfg"]["search"]
    best = None
    if ctx["cpu"]:
        best = start            # no out-of-memory on CPU: the search is a GPU thing
    else:
        b = start
        while True:
            r = run_worker(spec(ctx, b, False, True, steps=1, warmup=1))
            if r.get("oom"):
                break
            best, b = b, b + step
    if best is None:
        say("largest", f"even batch {start} does not train in {ctx['cap_text']} without LMS", False, {})
        return
    goal = int(math.ceil(4.7 * best / 8) * 8)
    got, tried = None, []
    for b in (goal,) if ctx["cpu"] else (goal, 2 * goal):
        r = run_worker(spec(ctx, b, True, True, steps=1, warmup=2), timeout=600)
        tried.append(r)
        if r.get("oom"):
            break
        got = b
    text = (f"largest batch in {ctx['cap_text']}: without LMS {best}, with LMS >= {got} "
            f"({(got or 0) / best:.2f}x); target >= 4.7x ({goal})")
    say("largest", text, None if ctx["cpu"] else bool(got and got >= goal), {"without": best, "with": got,
                                                                             "runs": tried})


def overhead(ctx):
    b = ctx["cfg"]["small"]
    off = run_worker(spec(ctx, b, False, True))
    on = run_worker(spec(ctx, b, True, True))
    if off.get("oom") or on.get("oom"):
        say("overhead", f"batch {b}: {off.get('error') or on.get('error')}", False, {"off": off, "on": on})
        return
    r = on["ms_per_step"] / off["ms_per_step"]
    say("overhead", f"batch {b} (fits) in {ctx['cap_text']}: LMS on (default limit) {on['ms_per_step']:.1f} ms/step vs "
        f"off {off['ms_per_step']:.1f} ms/step = {r:.3f}x; target <= 1.02", None if ctx["cpu"] else r <= 1.02,
        {"ratio": r, "off": off, "on": on})


def equal(ctx):
    import torch

    b, n = ctx["cfg"]["batch"], ctx["cfg"]["equal_steps"]
    tmp = tempfile.mkdtemp(prefix="lms-bench-")
    try:
        runs = {}
        for name, lms, capped in (("plain", False, False), ("lms", True, True)):
            path = os.path.join(tmp, name + ".pt")
            runs[name] = run_worker(spec(ctx, b, lms, capped, steps=n, warmup=0, deterministic=True, save=path))
            if runs[name].get("oom"):
                say("equal", f"{n} steps at batch {b}: {name}: {runs[name]['error']}", False, runs)
                return
        a, c = (torch.load(os.path.join(tmp, n + ".pt")) for n in ("plain", "lms"))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    worst, worst_bn = 0.0, 0.0
    ok = True
    for k in a:
        x, y = a[k].double(), c[k].double()
        diff = (x - y).abs().max().item() if x.numel() else 0.0
        if "running_" in k or "num_batches" in k:
            worst_bn = max(worst_bn, diff)
        else:
            worst = max(worst, diff)
        ok = ok and torch.allclose(x, y, rtol=1e-4, atol=1e-5)
    loss_a, loss_c = runs["plain"]["loss"], runs["lms"]["loss"]
    ok = ok and math.isclose(loss_a, loss_c, rel_tol=1e-4, abs_tol=1e-6)
    moved = runs["lms"].get("stats", "")
    say("equal", f"{n} steps at batch {b}, LMS in {ctx['cap_text']} vs uncapped without: loss {loss_c:.6f} vs "
        f"{loss_a:.6f}, largest parameter difference {worst:.2e}, BatchNorm statistics {worst_bn:.2e} "
        f"(rtol 1e-4, atol 1e-5)", ok, {"loss_lms": loss_c, "loss_plain": loss_a, "param_diff": worst,
                                        "bn_diff": worst_bn, "stats": moved})


def _ddlrun():
    return [sys.executable, "-c", "from wmlce_tools.ddlrun.cli import main; main()"]


def wmlce(ctx):
    cfg = dict(ctx["cfg"])
    tmp = tempfile.mkdtemp(prefix="lms-wmlce-")
    try:
        script = os.path.join(tmp, "wmlce_lms.py")
        with open(script, "w") as f:
            f.write(WMLCE_SCRIPT.format(here=HERE, cfg=cfg))
        env = dict(os.environ)
        if ctx["cpu"]:
            env["DDL_LMS_STANDIN_BYTES"] = str(cfg["cap"])
        proc = subprocess.run([*_ddlrun(), "--lms", "-n", "1", "--", sys.executable, script], capture_output=True,
                              text=True, timeout=600, env=env, cwd=tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    ok = proc.returncode == 0 and "TRAINED" in proc.stdout
    why = "trained" if ok else (proc.stderr.strip().splitlines() or ["?"])[-1][:300]
    say("wmlce", f"a WML CE script (torch.cuda.set_enabled_lms(True), no wml import) under ddlrun --lms at batch "
        f"{cfg['batch']} in {ctx['cap_text']}: exit {proc.returncode}, {why}", ok, {"exit": proc.returncode})


def ranks(ctx):
    mpiexec = shutil.which("mpiexec") or os.path.join(os.path.dirname(sys.executable), "mpiexec")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [REPO, os.environ.get("PYTHONPATH")])))
    if ctx["cpu"]:
        env["DDL_LMS_STANDIN_BYTES"] = str(ctx["cfg"]["cap"])      # each rank's stand-in device
    cmd = [mpiexec, "-n", "2", "-genv", "CUDA_VISIBLE_DEVICES", "0", sys.executable, __file__, "--worker-ranks",
           json.dumps({"cfg": ctx["cfg"], "cpu": ctx["cpu"]})]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    line = next((x for x in proc.stdout.splitlines() if "RANKS " in x), None)
    data = json.loads(line.split("RANKS ", 1)[1]) if line else {"error": (proc.stderr.strip().splitlines()
                                                                          or ["?"])[-1][:300]}
    ok = proc.returncode == 0 and data.get("identical") is True and data.get("moved", 0) > 0
    say("ranks", f"2 ranks sharing the GPU ({ctx['cap_text']} between them), DistributedOptimizer + LMS, batch "
        f"{ctx['cfg']['ranks_batch']} each: exit {proc.returncode}, parameters identical on both: "
        f"{data.get('identical')}, LMS moved {data.get('moved', 0)} bytes", ok, data)


def worker_ranks(spec_: dict) -> None:
    import torch

    import ddl_runtime as ddl
    import ddl_runtime.lms as lms
    import ddl_runtime.torch as dt

    cfg, cpu = spec_["cfg"], spec_["cpu"]
    ddl.init()
    dev = torch.device("cpu" if cpu else "cuda")
    if not cpu:
        torch.cuda.set_per_process_memory_fraction(cfg["cap"] / 2 / torch.cuda.get_device_properties(0).total_memory)
    torch.manual_seed(0)
    model = resnet(cfg["layers"], cfg["width"]).to(dev)
    opt = dt.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9),
                                  named_parameters=model.named_parameters())
    session = lms.enable(model, budget=cfg["cap"] if cpu else 0, optimizer=opt)
    g = torch.Generator(device=dev).manual_seed(10 + ddl.rank())
    b = cfg["ranks_batch"]
    for _ in range(4):
        x = torch.randn(b, 3, cfg["image"], cfg["image"], device=dev, generator=g)
        y = torch.randint(0, 1000, (b,), device=dev, generator=g)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    flat = torch.cat([p.detach().reshape(-1).double().cpu() for p in model.parameters()]).numpy()
    everyone = ddl.allgather(flat[None, :])
    st = session.stats()
    if ddl.rank() == 0:
        print("RANKS " + json.dumps({"identical": bool((everyone[0] == everyone[1]).all()),
                                     "moved": st.swapped_bytes + st.recomputed_bytes, "stats": str(st)}), flush=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cpu", action="store_true", help="a small smoke run on CPU (host copies stand in for the GPU)")
    p.add_argument("--only", default=",".join(SECTIONS), help="comma-separated: " + ",".join(SECTIONS))
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--worker-ranks", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.worker:
        print("WORKER " + json.dumps(worker(json.loads(a.worker))), flush=True)
        return 0
    if a.worker_ranks:
        worker_ranks(json.loads(a.worker_ranks))
        return 0
    wanted = [s.strip() for s in a.only.split(",") if s.strip()]
    unknown = [s for s in wanted if s not in SECTIONS]
    if unknown:
        p.error(f"--only {','.join(unknown)}: choose from {','.join(SECTIONS)}")
    cfg = CPU if a.cpu else GPU
    if not a.cpu:
        import torch
        if not torch.cuda.is_available():
            print("lms_bench: no CUDA device here: run it on a GPU machine, or --cpu for the smoke run", file=sys.stderr)
            return 2
        print(f"lms_bench: {torch.cuda.get_device_name(0)}, torch {torch.__version__}, ResNet-152 fp32", flush=True)
    cap_text = f"{cfg['cap'] / GiB:g} GiB" if not a.cpu else f"{cfg['cap'] >> 20} MB (CPU stand-in)"
    ctx = {"cfg": cfg, "cpu": a.cpu, "cap_text": cap_text}
    for name in wanted:
        t0 = time.perf_counter()
        globals()[name](ctx)
        print(f"lms_bench: {name} took {time.perf_counter() - t0:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
