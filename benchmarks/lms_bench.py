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
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lms_models import gpt, resnet  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
GiB = 1 << 30
# timed sections run one after another, alone on the GPU; the others (no timing) then run side by side
TIMED = ("throughput", "gpt", "overhead")
UNTIMED = ("largest", "gpt_largest", "equal", "wmlce", "ranks")
SECTIONS = TIMED + UNTIMED

GPU = dict(layers=(3, 8, 36, 3), width=64, image=224, cap=16 * GiB, batch=256, small=64, steps=10, warmup=3,
           largest=80, search=16, ranks_batch=128, equal_steps=20,
           gpt=dict(layers=24, d_model=1024, heads=16, seq=1024, vocab=8192), gpt_steps=3, gpt_warmup=2)
CPU = dict(layers=(1, 1, 1, 1), width=4, image=32, cap=(5 << 20) // 2, batch=16, small=4, steps=2, warmup=2,
           largest=4, search=4, ranks_batch=8, equal_steps=4,
           gpt=dict(layers=2, d_model=32, heads=2, seq=16, vocab=64), gpt_steps=2, gpt_warmup=2)

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
    batch = spec["batch"]
    g = torch.Generator(device=dev).manual_seed(1)
    if spec.get("model") == "gpt":         # the decoder: AdamW, next-token loss outside the model
        t = spec["gpt"]
        model = gpt(t["layers"], t["d_model"], t["heads"], t["seq"], t["vocab"]).to(dev)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        tokens = torch.randint(0, t["vocab"], (batch, t["seq"] + 1), device=dev, generator=g)
        x, y = tokens[:, :-1], tokens[:, 1:].reshape(-1)
        per_item = t["seq"]                # throughput in tokens
    else:
        model = resnet(cfg["layers"], cfg["width"]).to(dev)
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        x = torch.randn(batch, 3, cfg["image"], cfg["image"], device=dev, generator=g)
        y = torch.randint(0, 1000, (batch,), device=dev, generator=g)
        per_item = 1
    if spec["lms"]:
        lms.enable(model, budget=cfg["cap"] if cpu else 0, optimizer=opt)
    sync = (lambda: None) if cpu else torch.cuda.synchronize
    torch.manual_seed(2)                   # dropout: the same draws in every run

    def step():
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x).flatten(0, -2), y)
        loss.backward()
        opt.step()
        return loss

    out = {"batch": batch, "lms": spec["lms"], "capped": spec["capped"], "losses": []}
    try:
        for _ in range(spec["warmup"]):
            out["losses"].append(float(step()))
        sync()
        t0 = time.perf_counter()
        for _ in range(spec["steps"]):
            loss = step()
        sync()
        dt = (time.perf_counter() - t0) / max(1, spec["steps"])
    except torch.OutOfMemoryError as e:
        return {**out, "oom": True, "error": str(e).splitlines()[0][:300]}
    out.update(oom=False, ms_per_step=dt * 1e3, images_per_s=batch * per_item / dt, loss=float(loss),
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
_PRINT = threading.Lock()     # sections run side by side: one section's lines at a time


def say(name: str, text: str, ok, data: dict) -> None:
    verdict = "n/a" if ok is None else ("PASS" if ok else "FAIL")
    with _PRINT:
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
    """Bounded (issue 48): the largest batch without LMS is known (80 on an H200 in 16 GiB, from a
    search from below): check that it trains and the next step up does not, then one run with LMS at
    4.7x it, yes or no."""
    best, step = ctx["cfg"]["largest"], ctx["cfg"]["search"]
    if not ctx["cpu"]:
        fits = run_worker(spec(ctx, best, False, True, steps=1, warmup=1))
        if fits.get("oom"):
            say("largest", f"batch {best} no longer trains in {ctx['cap_text']} without LMS ({fits['error'][:80]})",
                False, {"runs": [fits]})
            return
        while True:          # the next step up must not fit (else the known figure is stale: go on up)
            up = run_worker(spec(ctx, best + step, False, True, steps=1, warmup=1))
            if up.get("oom"):
                break
            best += step
    goal = int(math.ceil(4.7 * best / 8) * 8)
    r = run_worker(spec(ctx, goal, True, True, steps=1, warmup=2), timeout=600)
    got = None if r.get("oom") else goal
    text = (f"in {ctx['cap_text']}: without LMS {best} (not {best + step}), with LMS batch {goal} "
            f"{'trains' if got else 'does not'}; target 4.7x ({goal}) trains")
    say("largest", text, None if ctx["cpu"] else bool(got), {"without": best, "with": got, "run": r})


# -- the decoder transformer (issue 48): GPT-2-medium's shape, AdamW, at 4x the batch that fits -----
def gpt_probe(ctx) -> dict:
    """Peak memory at batch 1 and 2, uncapped, in one process: the batch that should just fit."""
    import torch

    t = ctx["cfg"]["gpt"]
    dev = torch.device("cuda")
    model = gpt(t["layers"], t["d_model"], t["heads"], t["seq"], t["vocab"]).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    peaks = {}
    for b in (1, 1, 2):
        tokens = torch.randint(0, t["vocab"], (b, t["seq"] + 1), device=dev)
        torch.cuda.reset_peak_memory_stats()
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(tokens[:, :-1]).flatten(0, 1), tokens[:, 1:].reshape(-1)).backward()
        opt.step()
        torch.cuda.synchronize()
        peaks[b] = torch.cuda.max_memory_allocated()
    per, fixed = peaks[2] - peaks[1], 2 * peaks[1] - peaks[2]
    return {"per_sample": per, "fixed": fixed, "estimate": max(1, int((0.95 * ctx["cfg"]["cap"] - fixed) // per))}


def _gpt_spec(ctx, batch, lms, capped, **kw):
    c = ctx["cfg"]
    return spec(ctx, batch, lms, capped, model="gpt", gpt=c["gpt"], steps=c["gpt_steps"], warmup=c["gpt_warmup"],
                **kw)


def gpt_section(ctx):
    import torch

    if ctx["cpu"]:
        b0 = ctx["cfg"]["largest"]
    else:
        probe = _subprocess_json([sys.executable, __file__, "--gpt-probe"], timeout=300)
        if "error" in probe:
            say("gpt", f"the memory probe failed: {probe['error']}", False, probe)
            return
        b0 = probe["estimate"]
    ctx["gpt_b0"] = b0
    big = 4 * b0
    tmp = tempfile.mkdtemp(prefix="lms-gpt-")
    try:
        runs = {}
        for name, lms, capped in (("uncapped", False, False), ("lms", True, True)):
            path = os.path.join(tmp, name + ".pt")
            runs[name] = run_worker(_gpt_spec(ctx, big, lms, capped, save=path), timeout=600)
            if runs[name].get("oom"):
                say("gpt", f"batch {big} ({name}): {runs[name]['error'][:120]}", False, runs)
                return
        a, c = (torch.load(os.path.join(tmp, n + ".pt")) for n in ("uncapped", "lms"))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    worst = max(((a[k].double() - c[k].double()).abs().max().item() for k in a if a[k].numel()), default=0.0)
    la, lc = runs["uncapped"]["losses"] + [runs["uncapped"]["loss"]], runs["lms"]["losses"] + [runs["lms"]["loss"]]
    same = all(math.isclose(x, y, rel_tol=1e-3) for x, y in zip(la, lc))
    r = runs["lms"]["images_per_s"] / runs["uncapped"]["images_per_s"]
    t = ctx["cfg"]["gpt"]
    say("gpt", f"{t['layers']}x{t['d_model']} decoder, seq {t['seq']}, batch {big} (4x {b0}) with LMS in "
        f"{ctx['cap_text']}: {runs['lms']['images_per_s']:.0f} tokens/s = {r:.3f}x of uncapped "
        f"({runs['uncapped']['images_per_s']:.0f}); losses {'equal' if same else 'DIFFER'} (rel 1e-3), largest "
        f"parameter difference {worst:.1e}; target >= 0.75", None if ctx["cpu"] else (r >= 0.75 and same),
        {"ratio": r, "b0": b0, "losses_uncapped": la, "losses_lms": lc, "param_diff": worst,
         "uncapped": runs["uncapped"], "lms": runs["lms"]})


def gpt_largest(ctx):
    """The batch the gpt line took as the largest that trains without LMS: it does, and one more does not."""
    b0 = ctx.get("gpt_b0")
    if b0 is None:
        say("gpt_largest", "no batch to check (the gpt line did not run)", None if ctx["cpu"] else False, {})
        return
    if ctx["cpu"]:
        say("gpt_largest", f"batch {b0} (CPU: no out-of-memory to find)", None, {})
        return
    fits = run_worker(_gpt_spec(ctx, b0, False, True, steps=1, warmup=1))
    more = run_worker(_gpt_spec(ctx, b0 + 1, False, True, steps=1, warmup=1))
    ok = not fits.get("oom") and bool(more.get("oom"))
    say("gpt_largest", f"without LMS in {ctx['cap_text']}: batch {b0} {'trains' if not fits.get('oom') else 'does not'}"
        f", {b0 + 1} {'does not' if more.get('oom') else 'trains too'}; target: {b0} is the largest", ok,
        {"fits": fits, "more": more})


def _subprocess_json(cmd, timeout):
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("WORKER "):
            return json.loads(line[len("WORKER "):])
    return {"error": f"exit {proc.returncode}: {(proc.stderr.strip().splitlines() or ['?'])[-1][:300]}"}


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
    p.add_argument("--gpt-probe", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.gpt_probe:
        print("WORKER " + json.dumps(gpt_probe({"cfg": GPU})), flush=True)
        return 0
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
    def run(name):
        t0 = time.perf_counter()
        (gpt_section if name == "gpt" else globals()[name])(ctx)
        with _PRINT:
            print(f"lms_bench: {name} took {time.perf_counter() - t0:.0f} s", flush=True)

    for name in (n for n in TIMED if n in wanted):
        run(name)
    side_by_side = [n for n in UNTIMED if n in wanted]
    # no timing in these: several at once on a large GPU (each capped at 16 GiB; the uncapped 20-step
    # run of `equal` peaks at about 43 GiB), one at a time on CPU (CI) or a smaller card
    width = 1 if a.cpu else (len(side_by_side) or 1) if _device_bytes() >= 120 * GiB else 2
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(max_workers=width) as pool:
        for f in [pool.submit(run, n) for n in side_by_side]:
            f.result()
    return 0


def _device_bytes() -> int:
    import torch
    return torch.cuda.get_device_properties(0).total_memory


if __name__ == "__main__":
    sys.exit(main())
