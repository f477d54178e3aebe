"""(site, one trial's ResourceRequest, program with ``{name}`` fields, trials) -> a validated
SweepPlan: array or packed and why, the job script, the run's record.  Everything is checked
here, before anything is written (an unknown ``{name}``, an empty grid, a grid over the site's
array limit, a trial that cannot fit the packed allocation)."""
from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Sequence

from ..errors import WmlError
from ..jobscript import JobPlan, SweepLaunch, plan_job, render_script
from ..quoting import sh_join
from ..resources import ResourceRequest
from ..site.schema import SiteProfile
from ..sweeps import record
from ..sweeps.array import array_output, array_spec
from ..sweeps.grid import Trial, check_program
from ..sweeps.pack import Allocation, check_fits, need_of

NO_ARRAYS = {"cobalt": "Cobalt has no job arrays", "local": "the local site has no scheduler"}


@dataclass(frozen=True)
class SweepOptions:
    """How the trials run: ``max_running`` at once; ``pack``: nodes of one allocation running
    them all (None: the site's default, array or packed)."""

    max_running: Optional[int] = None
    pack: Optional[int] = None

    def __post_init__(self) -> None:
        for name in ("max_running", "pack"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise WmlError(f"--{name.replace('_', '-')} must be an integer >= 1, got {v!r}")


@dataclass(frozen=True)
class SweepPlan:
    mode: str                   # "array" | "packed"
    why: str
    plan: JobPlan               # the job submitted (array: one trial's; packed: the allocation)
    trial_plan: JobPlan         # one trial (its ddlrun line, with the {name} fields)
    record: record.SweepRecord
    run_dir: Path
    per_time: int = 1           # trials an array element or a packed slot runs (informational)
    walltime_note: Optional[str] = None   # how the job's walltime follows from one trial's (-t)

    @property
    def warnings(self) -> List[str]:
        """Lines for stderr: the job's, and parameters the program's arguments never name."""
        from ..sweeps.grid import Trial, unnamed_parameters

        trials = [Trial(i, tuple(v.items())) for i, v in enumerate(self.record.trials)]
        unnamed = unnamed_parameters(self.record.program, trials)
        return [*self.plan.warnings, *([unnamed] if unnamed else [])]

    @property
    def script(self) -> str:
        return render_script(self.plan)

    def describe(self) -> str:
        """The dry run's summary lines."""
        n = self.record.size
        lay = self.trial_plan.layout
        lines = [f"# sweep: {n} trial(s), each {lay.describe()}",
                 f"# runs as {'a job array' if self.mode == 'array' else 'one packed allocation'}: {self.why}"]
        if self.walltime_note:
            lines.append(f"# walltime: {self.walltime_note}")
        if self.plan.queue_why:
            lines.append(f"# queue: {self.plan.queue_why}")
        docs = self.plan.site.sweep.docs
        if docs:
            lines.append(f"# {self.plan.site.name}'s page: {docs[0]}")
        return "\n".join(lines) + "\n"


def _trial_module() -> List[str]:
    return [sys.executable, "-m", "wmlce_tools.sweeps.trial"]


def choose_mode(site: SiteProfile, n: int, opts: SweepOptions) -> tuple:
    if site.scheduler in NO_ARRAYS:
        return "packed", f"{NO_ARRAYS[site.scheduler]}: the trials run in one allocation"
    if opts.pack is not None:
        return "packed", f"--pack {opts.pack}: the trials run in one allocation of {opts.pack} node(s)"
    if site.sweep.default == "packed":
        return "packed", f"{site.name}'s profile runs sweeps packed (its per-user job limits)"
    limit = site.sweep.array_limit
    if limit is not None and n > limit:
        page = f" ({site.sweep.docs[0]})" if site.sweep.docs else ""
        raise WmlError(f"{n} trials is over {site.name}'s limit of {limit} per job array{page}; "
                       f"run them packed in one job with --pack NODES")
    k = f", at most {opts.max_running} running at once (--max-running)" if opts.max_running else ""
    return "array", f"{site.name} ({site.scheduler}) takes job arrays: one element per trial{k}"


def _packed_request(site: SiteProfile, req: ResourceRequest) -> ResourceRequest:
    """A trial holding part of a node gets the cores that go with its GPUs (not the fair share
    of the whole node, which would hold the node)."""
    G = site.node.gpus
    g = req.gpus_per_rank
    if req.cores_per_rank is not None or not G or not g:
        return req
    rpn = req.ranks_per_node or max(1, G // g)
    if g * rpn >= G:
        return req
    return dataclasses.replace(req, cores_per_rank=max(1, site.node.cores * g // G))


def plan_sweep(site: SiteProfile, req: ResourceRequest, program: Sequence[str], trials: Sequence[Trial],
               opts: SweepOptions, run_dir: Path, *, preview: bool = False, run_id: Optional[str] = None,
               only: Optional[Sequence[int]] = None, submit_index: int = 1,
               workdir: Optional[Path] = None) -> SweepPlan:
    """Validate the whole sweep.  ``only``: the trials a resume reruns (else all)."""
    if not trials:
        raise WmlError("empty sweep: give --param NAME=V1,V2, --params-file FILE or --seeds N")
    check_program(program, trials)
    run_dir = Path(run_dir)
    jobdir = run_dir / f"submit-{submit_index}"
    todo = list(only) if only is not None else list(range(len(trials)))
    mode, why = choose_mode(site, len(todo), opts)
    if mode == "packed":
        if req.spare_nodes:
            raise WmlError("--spare-nodes: packed trials share one allocation, laid out without spares; give it to "
                           "an array sweep (each trial its own job) or leave it out (--restarts heals on the same nodes)")
        req = _packed_request(site, req)
    trial_plan = plan_job(site, req, program, jobdir=jobdir, workdir=workdir, preview=preview)
    ddlrun = sh_join(trial_plan.ddlrun_argv)
    rec = record.SweepRecord(run_id=run_id or run_dir.name, site=site.name, scheduler=site.scheduler, mode=mode,
                             program=list(program), trials=[t.values for t in trials],
                             max_running=opts.max_running, pack_nodes=opts.pack, why=why,
                             request=dataclasses.asdict(req), workdir=str(workdir or Path.cwd()))
    only_env = (("WML_SWEEP_ONLY", ",".join(map(str, todo))),) if only is not None else ()
    if mode == "array":
        spec = array_spec(site.scheduler, len(todo), opts.max_running, req.job_name)
        runner = [*_trial_module(), str(run_dir)]
        launch = (f"{sh_join(runner)} {spec.index}"
                  + (f" --base {spec.base}" if spec.base else "") + (f" --stride {spec.stride}" if spec.per_element > 1 else "")
                  + f" -- {ddlrun}")
        plan = trial_plan
        if spec.stride > 1:
            why = (f"{site.name} (PBS Pro) takes job arrays, but -J has no limit on running subjobs: "
                   f"--max-running {spec.stride} gives {spec.stride} subjobs, each running its trials "
                   f"(every {spec.stride}th) one after another, walltime x {spec.per_element}")
            rec = dataclasses.replace(rec, why=why)
        note = None
        if spec.per_element > 1 and plan.walltime:    # PBS Pro --max-running: trials one after another
            plan, note = _rounds_walltime(site, req, spec.per_element, program, jobdir, workdir, preview,
                                          f"each subjob runs {spec.per_element} trial(s) one after another")
        out = array_output(site.scheduler, plan.output) if not req.output else plan.output
        err = array_output(site.scheduler, plan.error) if not req.error and not req.output else plan.error
        plan = dataclasses.replace(plan.with_job_vars(only_env), output=out, error=err,
                                   sweep=SweepLaunch(spec.directives, _deadline(plan) + launch, spec.lsf_job_name))
        return SweepPlan(mode, why, plan, trial_plan, rec, run_dir, spec.per_element, note)
    # packed: one allocation of M nodes, the trials placed on it by the trial's Layout
    lay = trial_plan.layout
    k = opts.max_running
    nodes = opts.pack or lay.nodes * (min(len(todo), k) if k else 1)
    # the allocation: the trial's request (its env, modules, exports, container, what it asks the
    # scheduler beside its nodes) on `nodes` nodes, the placement left to the allocation
    alloc_req = dataclasses.replace(req, nodes=nodes, ranks_per_node=None, gpus_per_rank=None, ranks_per_gpu=None,
                                    cores_per_rank=None)
    alloc_plan = plan_job(site, alloc_req, program, jobdir=jobdir, workdir=workdir, preview=preview)
    node = alloc_plan.layout.node_spec
    alloc = Allocation(nodes=nodes, gpus_per_node=node.gpus, cores_per_node=node.cores)
    need = need_of(lay, alloc, oversubscribe=site.scheduler == "local")
    at_once = check_fits(need, alloc, f"the packed allocation ({nodes} node(s))")
    if not need.whole or lay.nodes == 1:
        # the allocation holds each node's trials' ranks as task slots (SLURM_TASKS_PER_NODE: ddlrun
        # checks a trial's ranks against them), with the trial's cores and GPUs per rank
        per_node = max(1, at_once // nodes) if not need.whole else 1
        shaped = dataclasses.replace(alloc_req, ranks_per_node=per_node * lay.ranks_per_node,
                                     cores_per_rank=lay.cores_per_rank,
                                     gpus_per_rank=lay.gpus_per_rank if lay.ranks_per_gpu == 1 else None,
                                     ranks_per_gpu=lay.ranks_per_gpu if lay.ranks_per_gpu > 1 else None)
        try:
            plan_job(site, shaped, program, jobdir=jobdir, workdir=workdir, preview=preview)
            alloc_req = shaped
        except WmlError:
            pass       # the node cannot say it that way: the allocation as a plain job of `nodes` nodes
    at_once = min(at_once, k or at_once, len(todo))
    rounds = -(-len(todo) // at_once)
    # the allocation holds every round of trials: walltime = rounds x one trial's (-t)
    alloc_plan, note = _rounds_walltime(
        site, alloc_req, rounds, program, jobdir, workdir, preview,
        f"{len(todo)} trial(s), {at_once} at a time, run in {rounds} round(s)")
    rec = dataclasses.replace(rec, pack={"allocation": alloc.as_dict(), "need": need.as_dict(),
                                         "gpu_env": site.gpu_env})
    why = f"{why}; {at_once} trial(s) at a time"
    if opts.pack is None and at_once == 1 and len(todo) > 1:
        why += f" (--pack NODES or --max-running K for more)"
    rec = dataclasses.replace(rec, why=why)
    launch = f"{sh_join([sys.executable, '-m', 'wmlce_tools.sweeps.packed', str(run_dir)])} -- {ddlrun}"
    # the job script loads and shows what each trial's launch needs: the trial's plan, not the allocation's
    plan = dataclasses.replace(alloc_plan, launch=trial_plan.launch, modules=trial_plan.modules)
    plan = dataclasses.replace(plan.with_job_vars(only_env),
                               sweep=SweepLaunch((), _deadline(alloc_plan) + launch, None,
                                                 launcher_line=sh_join(trial_plan.launcher_argv)))
    return SweepPlan("packed", why, plan, trial_plan, rec, run_dir, rounds, note)


def _duration(seconds: int) -> str:
    """90 -> "1 min 30 s", 5400 -> "1 h 30 min" (the dry run's words for a walltime)."""
    h, rest = divmod(int(seconds), 3600)
    m, s = divmod(rest, 60)
    return " ".join(f"{v} {u}" for v, u in ((h, "h"), (m, "min"), (s, "s")) if v) or "0 s"


def _deadline(plan: JobPlan) -> str:
    """The launch line's prefix telling the trial runner when the job's walltime ends (a trial
    stopped then is TIMEOUT, not CANCELLED): ``WML_JOB_DEADLINE=<end>/<walltime s>``."""
    wall = plan.request.walltime_s if plan.site.scheduler == "local" else (plan.walltime or 0) * 60
    if not wall:
        return ""
    return f"{record.DEADLINE_VAR}=$(( $(date +%s) + {int(wall)} ))/{int(wall)} "


def _rounds_walltime(site: SiteProfile, req: ResourceRequest, rounds: int, program, jobdir, workdir, preview,
                     how: str):
    """The job of ``req`` with a walltime that holds ``rounds`` trials one after another (-t is
    one trial's), and the dry run's line saying so; a queue limit it passes is refused with the
    walltime the job would need."""
    one_s = req.walltime_s if req.walltime_s is not None else (req.walltime * 60 if req.walltime else None)
    if one_s is None or rounds <= 1:
        plan = plan_job(site, req, program, jobdir=jobdir, workdir=workdir, preview=preview)
        if one_s is None and rounds > 1:
            return plan, (f"{how}; no -t: the site's default walltime for the whole job "
                          f"(-t gives one trial's, and the job gets {rounds} times it)")
        return plan, (f"{how}: one trial's -t" if one_s is not None else None)
    total_s = one_s * rounds
    if site.scheduler != "local":
        total_s = -(-total_s // 60) * 60       # the scheduler's whole minutes
    total_min = -(-total_s // 60)
    one, total = _duration(one_s), _duration(total_s)
    try:
        plan = plan_job(site, dataclasses.replace(req, walltime=total_min, walltime_s=total_s), program,
                        jobdir=jobdir, workdir=workdir, preview=preview)
    except WmlError as e:
        raise WmlError(f"{how} of {one} each (-t): the job needs a walltime of {total} ({rounds} x {one}), but {e}; "
                       f"run more trials at once (--pack NODES, --max-running K) or give a shorter -t") from None
    return plan, f"{how} of {one} each (-t): the job asks for {total} ({rounds} x {one})"
