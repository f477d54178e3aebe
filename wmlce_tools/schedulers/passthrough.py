"""What wml does not model, passed to the site's scheduler in its own spelling: ``--mem``,
``--exclusive``, ``--reservation``, ``--mail``, ``--begin``, ``--constraint``, and any directive
of that scheduler (``--directive '#SBATCH --licenses=scratch'``).

Spellings (checked against each scheduler's manual):
- Slurm sbatch(1): ``--mem=<size>[K|M|G|T]``, ``--exclusive``, ``--reservation=<name>``,
  ``--mail-user=<user>`` with ``--mail-type=<type>``, ``--begin=<time>`` (``HH:MM[:SS]``,
  ``YYYY-MM-DD[THH:MM[:SS]]``), ``--constraint=<list>`` (features joined with ``&``).
- PBS Pro qsub: ``-l select=...:mem=<size>`` (a chunk resource), ``-l place=...:excl``, a
  reservation is its queue (``-q R123``), ``-M <user>`` with ``-m ae``,
  ``-a [[[[CC]YY]MM]DD]hhmm[.SS]``; node features are chunk resources of the site (no generic
  constraint: ``--directive``).
- LSF bsub: ``-U <reservation>``, ``-u <user>`` with ``-N``, ``-b [[year:][month:]day:]hour:minute``,
  ``-R "select[<features>]"``; no memory or exclusive option.  wml's LSF jobs ask for nodes with
  ``-nnodes`` (OLCF's Summit guide, "Common bsub Options"), which is LSF's CSM "easy mode"
  (bsub -nnodes page): a job gets compute nodes whole (the guide counts them in node-hours;
  jsrun's resource sets are cgroups carved out of the job's own nodes), so ``-x`` (exclusive
  execution on a host, which needs a queue set up for it: bsub -x page) would buy nothing, and
  easy mode has no compute-node memory request at all (``-cn_mem`` exists only in expert mode,
  ``-csm y``; ``-ln_mem`` is the launch node's: bsub -cn_mem / -ln_mem pages), so
  ``-R "rusage[mem=...]"`` would reserve nothing on the nodes the job runs on.  Both are refused
  in one line saying so, as Cobalt's are.
- Cobalt qsub: ``--notify <user>``, a reservation is its queue (``-q``), ``--attrs`` for node
  attributes; no memory, begin time or exclusive option (Cobalt never shares a node).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import List, Optional, Tuple

from ..errors import WmlError
from ..quoting import check_directive_value

PREFIX = {"slurm": "#SBATCH", "pbs": "#PBS", "lsf": "#BSUB", "cobalt": "#COBALT"}
TITLE = {"slurm": "Slurm", "pbs": "PBS Pro", "lsf": "LSF", "cobalt": "Cobalt", "local": "no scheduler"}
_MEM = re.compile(r"^(\d+)\s*([KMGT])?B?$", re.I)
_MAIL = re.compile(r"^[A-Za-z0-9_.+-]+(@[A-Za-z0-9.-]+)?$")
_CONSTRAINT = re.compile(r"^[A-Za-z0-9_.=&|-]+$")
#: why LSF (CSM easy mode, #BSUB -nnodes: see above) takes neither; a #BSUB -x directive is refused too
_LSF_WHOLE_NODES = "an LSF job here gets its compute nodes whole (#BSUB -nnodes, LSF's CSM easy mode)"
LSF_EXCLUSIVE = f"{_LSF_WHOLE_NODES}, so no other job shares them: there is nothing to ask for"

#: options of each scheduler that wml writes itself: a --directive naming one is refused (the
#: scheduler would read two), with the wml option that sets it
OWNED = {
    "slurm": {"--job-name": "-J", "-J": "-J", "--nodes": "-N", "-N": "-N", "--ntasks-per-node": "--ranks-per-node",
              "--cpus-per-task": "--cores-per-rank", "-c": "--cores-per-rank", "--time": "-t", "-t": "-t",
              "--partition": "-q", "-p": "-q", "--qos": "--qos", "-q": "--qos", "--account": "-A", "-A": "-A",
              "--output": "-o", "-o": "-o", "--error": "-e", "-e": "-e", "--dependency": "--after", "-d": "--after",
              "--gpus-per-node": "--gpus-per-rank", "--threads-per-core": "--threads-per-core",
              "--constraint": "--constraint", "-C": "--constraint", "--mem": "--mem", "--exclusive": "--exclusive",
              "--reservation": "--reservation", "--begin": "--begin", "-b": "--begin", "--mail-user": "--mail",
              # what the Layout sets another way: sbatch would read both and run another shape
              "--ntasks": "-N and --ranks-per-node", "-n": "-N and --ranks-per-node",
              "--gpus": "--gpus-per-rank", "-G": "--gpus-per-rank", "--gpus-per-task": "--gpus-per-rank",
              "--ntasks-per-gpu": "--ranks-per-gpu", "--gres gpu": "--gpus-per-rank",
              "--array": "wml sweep", "-a": "wml sweep"},
    "pbs": {"-N": "-J", "-A": "-A", "-q": "-q", "-o": "-o", "-e": "-e", "-M": "--mail", "-a": "--begin",
            "-l select": "-N", "-l place": "--exclusive", "-l walltime": "-t", "-W depend": "--after"},
    "lsf": {"-J": "-J", "-P": "-A", "-W": "-t", "-nnodes": "-N", "-q": "-q", "-o": "-o", "-e": "-e",
            "-w": "--after", "-alloc_flags": "--alloc-flags", "-U": "--reservation",
            "-u": "--mail", "-b": "--begin"},
    "cobalt": {"-n": "-N", "-t": "-t", "-q": "-q", "-A": "-A", "--jobname": "-J", "-o": "-o", "-e": "-e",
               "-O": "-o", "--dependencies": "--after", "--attrs": "--constraint", "--notify": "--mail",
               "-M": "--mail"},
}


@dataclass(frozen=True)
class Passthrough:
    """The header lines and the changes to wml's own directives these options make."""

    lines: Tuple[str, ...] = ()           # after wml's own directives, in the option order
    pbs_select: Tuple[str, ...] = ()      # more chunk resources (mem=64gb)
    pbs_place: Optional[str] = None       # excl
    constraint: Optional[str] = None      # Slurm --constraint, joined to the site's with &
    cobalt_attrs: Optional[str] = None    # joined to the site's --attrs with :
    queue: Optional[str] = None           # a PBS/Cobalt reservation is its queue


def _refuse(site, option: str, why: str = "") -> WmlError:
    what = TITLE.get(site.scheduler, site.scheduler)
    return WmlError(f"{option}: {site.name} ({what}) has no such option{'; ' + why if why else ''}")


def _mem(value: str) -> Tuple[int, str]:
    m = _MEM.match(value.strip())
    if not m:
        raise WmlError(f"--mem {value!r}: expected a size per node such as 64G, 500M or 1T")
    return int(m.group(1)), (m.group(2) or "M").upper()


def _begin(value: str) -> datetime | str:
    """``HH:MM`` (today, as every scheduler takes it) or ``YYYY-MM-DDTHH:MM[:SS]``."""
    text = value.strip()
    if re.fullmatch(r"\d{1,2}:\d{2}", text):
        h, m = map(int, text.split(":"))
        if h < 24 and m < 60:
            return f"{h:02d}:{m:02d}"
    for fmt in ("%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M", "%Y-%m-%d %H:%M"):
        try:
            return datetime.strptime(text, fmt)
        except ValueError:
            pass
    raise WmlError(f"--begin {value!r}: expected HH:MM or YYYY-MM-DDTHH:MM[:SS]")


def _slurm_qos_free(site, req) -> bool:
    """Whether wml writes no QOS for this job (a Slurm site whose -q is a partition and no
    --qos): a directive may then give one (``#SBATCH --qos=high``)."""
    return site.slurm.queue_option != "qos" and (req is None or getattr(req, "qos", None) is None)


def check_directive(site, text: str, req=None) -> str:
    """A ``--directive`` line: this site's scheduler's, one line, not one wml writes itself
    for this job (``req``)."""
    sched = site.scheduler
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in text):
        raise WmlError(f"--directive {text!r}: one line, no control characters")
    line = text.strip()
    prefix = PREFIX.get(sched)
    if prefix is None:
        raise WmlError(f"--directive {line!r}: {site.name} has no scheduler to read it")
    found = re.match(r"^#(SBATCH|PBS|BSUB|COBALT)\b", line)
    if not found or found.group(0) != prefix:
        said = f"a {found.group(0)} line" if found else "not a scheduler directive"
        raise WmlError(f"--directive {line!r}: {said}; {site.name} ({TITLE[sched]}) reads '{prefix} ...' lines")
    rest = line[len(prefix):].strip()
    if not rest:
        raise WmlError(f"--directive {line!r}: names no option")
    word = rest.split()[0].split("=")[0]
    key = word
    if sched == "pbs" and word in ("-l", "-W") and len(rest.split()) > 1:
        key = f"{word} {re.split(r'[=:]', rest.split()[1])[0]}"
    if sched == "slurm" and word == "--gres":
        value = rest[len(word):].lstrip(" =")
        if any(g.split(":")[0] == "gpu" for g in value.split(",")):
            key = "--gres gpu"
    if sched == "slurm" and key in ("--qos", "-q") and _slurm_qos_free(site, req):
        return f"{prefix} {rest}"
    if sched == "lsf" and key == "-x":
        raise WmlError(f"--directive {line!r}: {LSF_EXCLUSIVE}")
    if key in OWNED[sched]:
        give = "-q" if sched == "slurm" and key in ("--qos", "-q") and site.slurm.queue_option == "qos" else OWNED[sched][key]
        raise WmlError(f"--directive {line!r}: wml writes {key} itself; give {give}")
    return f"{prefix} {rest}"


def passthrough(site, req) -> Passthrough:
    """The pass-through options of ``req`` on ``site``; an option the site's scheduler lacks is
    one error naming the site."""
    sched = site.scheduler
    given = [(o, v) for o, v in (("--mem", req.mem), ("--exclusive", req.exclusive or None),
                                 ("--reservation", req.reservation), ("--mail", req.mail),
                                 ("--begin", req.begin), ("--constraint", req.constraint)) if v is not None]
    if sched == "local" and (given or req.directives):
        opt = given[0][0] if given else "--directive"
        raise WmlError(f"{opt}: {site.name} runs jobs now on this machine, with no scheduler to pass it to")
    lines: List[str] = []
    out = {}
    p = PREFIX.get(sched)
    for option, value in given:
        if option == "--mem":
            n, unit = _mem(value)
            if sched == "slurm":
                lines.append(f"{p} --mem={n}{unit}")
            elif sched == "pbs":
                out["pbs_select"] = (f"mem={n}{unit.lower()}b",)
            elif sched == "lsf":
                whole = f"{site.node.memory_gb:g} GB" if site.node.memory_gb else "all its memory"
                raise _refuse(site, option, f"{_LSF_WHOLE_NODES}, each with {whole}; bsub asks for a "
                                            "compute node's memory only in CSM expert mode (-csm y -cn_mem), "
                                            "which wml does not write")
            else:
                raise _refuse(site, option, "a Cobalt job has its nodes' whole memory")
        elif option == "--exclusive":
            if sched == "slurm":
                lines.append(f"{p} --exclusive")
            elif sched == "pbs":
                out["pbs_place"] = "excl"
            elif sched == "lsf":
                raise _refuse(site, option, LSF_EXCLUSIVE)
            else:
                raise _refuse(site, option, "Cobalt never shares a node between jobs")
        elif option == "--reservation":
            check_directive_value(option, value)
            if sched == "slurm":
                lines.append(f"{p} --reservation={value}")
            elif sched == "lsf":
                lines.append(f"{p} -U {value}")
            else:       # PBS Pro and Cobalt: the reservation is a queue of its own
                if req.queue is not None:
                    raise WmlError(f"--reservation {value}: on {site.name} a reservation is its own queue; "
                                   f"give it or -q {req.queue}, not both")
                out["queue"] = value
        elif option == "--mail":
            if not _MAIL.match(value):
                raise WmlError(f"--mail {value!r}: expected a user name or an e-mail address")
            lines += {"slurm": [f"{p} --mail-user={value}", f"{p} --mail-type=END,FAIL"],
                      "pbs": [f"{p} -M {value}", f"{p} -m ae"],
                      "lsf": [f"{p} -u {value}", f"{p} -N"],
                      "cobalt": [f"{p} --notify {value}"]}[sched]
        elif option == "--begin":
            when = _begin(value)
            if sched == "cobalt":
                raise _refuse(site, option, "Cobalt starts a job when it can (a dependency waits: --after)")
            if isinstance(when, str):          # HH:MM today
                lines.append({"slurm": f"{p} --begin={when}", "pbs": f"{p} -a {when.replace(':', '')}",
                              "lsf": f"{p} -b {when}"}[sched])
            else:
                lines.append({"slurm": f"{p} --begin={when:%Y-%m-%dT%H:%M:%S}",
                              "pbs": f"{p} -a {when:%Y%m%d%H%M.%S}",
                              "lsf": f"{p} -b {when:%Y:%m:%d:%H:%M}"}[sched])
        elif option == "--constraint":
            if not _CONSTRAINT.match(value):
                raise WmlError(f"--constraint {value!r}: expected node features (letters, digits, _ . = - joined by & or |)")
            if sched == "slurm":
                out["constraint"] = value
            elif sched == "lsf":
                lines.append(f'{p} -R "select[{value}]"')
            elif sched == "cobalt":
                out["cobalt_attrs"] = value
            else:
                raise _refuse(site, option, "PBS Pro asks for node features as chunk resources: "
                                            "--directive '#PBS -l ...' with the site's resource names")
    lines += [check_directive(site, d, req) for d in req.directives]
    return Passthrough(lines=tuple(lines), **out)
