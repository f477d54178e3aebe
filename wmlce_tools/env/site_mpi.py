"""The site's MPI inside a user's environment (the site profile's ``mpi_in_env``).

Two routes, as the centres document them:

- ``external`` (conda envs): conda-forge's placeholder MPI package from the
  ``conda-forge/label/mpi-external`` label (where conda-forge moved its ``external_*`` builds in
  January 2026), pinned to the version the site's MPI is ABI-compatible with.  The solver then
  picks an mpi4py built against that MPI, and at run time the site's library (its module) is
  the one loaded.  A PyPI venv needs nothing: mpi4py's wheels load the MPI library they find at
  run time.
- ``build``: mpi4py compiled against the site's compiler wrapper after the env's packages
  (OLCF's recipe for Frontier: ``MPICC="cc -shared" pip install --no-binary=mpi4py mpi4py``),
  with the site's modules loaded; the spec's own conda mpi4py (and the MPI it pulls) is left out.

``mpi_library`` asks an env's python which MPI library mpi4py loaded: what ``wml env verify``
names, and checks against the site's ``library`` with ``--site``.
"""
from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from wmlce_tools.errors import WmlError
from wmlce_tools.env.create import PipStep

_MPI_PACKAGES = {"mpi4py", "mpich", "openmpi", "impi_rt", "msmpi"}


@dataclass
class SiteMpiPlan:
    site: str
    method: str
    channels: list[str] = field(default_factory=list)       # put before the spec's (external)
    packages: list[str] = field(default_factory=list)       # added to the spec's (external)
    dropped: list[str] = field(default_factory=list)        # the spec's MPI packages left out (build)
    pip_steps: list[PipStep] = field(default_factory=list)  # after the env's own packages (build)
    modules: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        """What ``wml env create --site S --dry-run`` prints about the MPI."""
        out = [f"site {self.site}: the site's MPI goes into the env by the {self.method!r} route"]
        if self.modules:
            out.append(f"  module load {' '.join(shlex.quote(m) for m in self.modules)}")
        for c in self.channels:
            out.append(f"  channel {c} (first)")
        for p in self.packages:
            out.append(f"  conda package {p}")
        for d in self.dropped:
            out.append(f"  left out of the conda solve: {d} (mpi4py is built against the site's MPI instead)")
        for step in self.pip_steps:
            env = " ".join(f"{k}={shlex.quote(v)}" for k, v in step.env.items())
            out.append(f"  {env} pip install {' '.join(step.options)} {' '.join(step.requirements)}".rstrip())
        out += [f"  {n}" for n in self.notes]
        return out


def _name(spec: str) -> str:
    return spec.split()[0].split("::")[-1].split("=")[0].split("<")[0].split(">")[0].lower()


def plan_for(site: Any, spec: Any, pypi: bool = False) -> SiteMpiPlan:
    """What ``--site`` changes in creating ``spec`` (an EnvSpec; a PypiSpec, or None for a
    lockfile, with ``pypi`` for a venv)."""
    mpi = getattr(site, "mpi_in_env", None)
    if mpi is None:
        raise WmlError(f"site {site.name} does not say how its MPI goes into an environment (no mpi_in_env "
                       f"in its profile)")
    plan = SiteMpiPlan(site=site.name, method=mpi.method, modules=list(mpi.modules))
    pypi = pypi or hasattr(spec, "requirements")
    if mpi.method == "external":
        if pypi:
            plan.notes.append(f"a PyPI venv: mpi4py's wheel loads the MPI library it finds at run time; load "
                              f"the site's MPI module ({mpi.mpi} {mpi.version}-compatible) before running")
            return plan
        if spec is None:
            raise WmlError(f"site {site.name}'s MPI route adds {mpi.mpi} {mpi.version} to the solve: give the spec, "
                           f"not a lockfile")
        plan.channels.append(mpi.channel)
        plan.packages.append(f"{mpi.mpi} {mpi.version}")
        if not any(_name(p.spec) == "mpi4py" for p in spec.packages):
            plan.packages.append("mpi4py")
        plan.notes.append(f"{mpi.mpi} from {mpi.channel} is an empty placeholder: the site's library is the "
                          f"one loaded at run time")
        return plan
    plan.dropped = [p.spec for p in getattr(spec, "packages", []) if _name(p.spec) in _MPI_PACKAGES]
    if pypi:
        options = ["--no-binary", "mpi4py", "--reinstall-package", "mpi4py", "--no-cache"]
    else:
        options = ["--no-binary=mpi4py", "--no-cache-dir"]
    plan.pip_steps.append(PipStep(what=f"building mpi4py against {site.name}'s MPI (MPICC={mpi.mpicc})",
                                  requirements=["mpi4py"], env={"MPICC": mpi.mpicc}, options=options))
    return plan


def apply_to_spec(plan: SiteMpiPlan, spec: Any) -> Any:
    """The conda spec with the plan's channels and packages (a copy)."""
    from wmlce_tools.env.spec import PackageEntry

    if hasattr(spec, "requirements"):
        return spec
    packages = [p for p in spec.packages if p.spec not in plan.dropped]
    packages = [p for p in packages if _name(p.spec) not in {_name(q) for q in plan.packages}]
    packages += [PackageEntry(q) for q in plan.packages]
    return replace(spec, channels=plan.channels + list(spec.channels), packages=packages)


def check_build_tools(plan: SiteMpiPlan) -> None:
    """The compiler wrapper must be on PATH (its modules loaded) before a build."""
    for step in plan.pip_steps:
        cc = shlex.split(step.env.get("MPICC", ""))[:1]
        if cc and shutil.which(cc[0]) is None:
            load = f": module load {' '.join(plan.modules)} first" if plan.modules else ""
            raise WmlError(f"{cc[0]} (MPICC for site {plan.site}) is not on PATH{load}")


# ---------------------------------------------------------------- verify

_PROBE = r"""
import json, os
import mpi4py
mpi4py.rc.initialize = False
mpi4py.rc.finalize = False
from mpi4py import MPI
libs = []
with open("/proc/self/maps") as f:
    for line in f:
        path = line.split()[-1] if len(line.split()) >= 6 else ""
        base = os.path.basename(path)
        if base.startswith("libmpi") and ".so" in base and path not in libs:
            libs.append(path)
print(json.dumps({"version": MPI.Get_library_version().strip().splitlines()[0].strip(), "libraries": libs,
                  "mpi4py": mpi4py.__version__}))
"""


@dataclass
class MpiLibrary:
    libraries: list[str]
    version: str
    mpi4py: str

    @property
    def main(self) -> str:
        return self.libraries[0] if self.libraries else "(no libmpi mapped)"


def mpi_library(python: Path) -> MpiLibrary | None:
    """The MPI library mpi4py loads in the env of ``python``; None when the env has no mpi4py."""
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    env.pop("PYTHONHOME", None)
    probe = subprocess.run([str(python), "-c", "import mpi4py"], capture_output=True, text=True, env=env, timeout=120)
    if probe.returncode != 0:
        return None
    proc = subprocess.run([str(python), "-c", _PROBE], capture_output=True, text=True, env=env, timeout=120)
    if proc.returncode != 0:
        lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
        raise WmlError(f"mpi4py in {python.parent.parent} cannot load an MPI library: "
                       f"{lines[-1] if lines else f'exit {proc.returncode}'}")
    data = json.loads(proc.stdout.strip().splitlines()[-1])
    return MpiLibrary(libraries=data["libraries"], version=data["version"], mpi4py=data["mpi4py"])


def check_site_library(found: MpiLibrary | None, site: Any) -> str | None:
    """None when mpi4py loads the site's MPI; else why not, in one line."""
    mpi = getattr(site, "mpi_in_env", None)
    if mpi is None:
        return f"site {site.name} names no MPI library (no mpi_in_env in its profile)"
    if found is None:
        return f"the env has no mpi4py (site {site.name}'s MPI goes in with: wml env create SPEC --site {site.name})"
    if any(mpi.library in lib for lib in found.libraries):
        return None
    return (f"mpi4py loads {found.main} ({found.version}), not site {site.name}'s MPI (a library whose path holds "
            f"{mpi.library!r})")
