"""What ddlrun checks before any rank starts in a container, each failure one line naming the
node and what is missing: the runtime is on this node, a path image is there and readable,
ch-run has a directory for every bind, and inside the image the python runs wml's rank shim
and finds every module the program imports at its top (``import torch``: an image without torch
fails here, not in every rank after the launch).

The probe runs once, on the node ddlrun runs on, through the same wrapper the ranks get.
"""
from __future__ import annotations

import ast
import json
import os
import shutil
import socket
import subprocess
from typing import List, Mapping, Optional, Sequence

from ..errors import WmlError
from ..quoting import sh_join
from .launch import EXECUTABLES, ContainerLaunch, is_path_image

PROBE_TIMEOUT_S = 120.0

PROBE = r"""
import importlib, importlib.util, json, os, shutil, sys
out = {"python": sys.version.split()[0], "missing": [], "shim": None, "absent": []}
for path in sys.argv[2].split("\n") if sys.argv[2] else ():
    if not (shutil.which(path) if "/" not in path and not path.endswith(".py") else os.path.exists(path)):
        out["absent"].append(path)
if sys.argv[1] == "1":
    try:
        importlib.import_module("wmlce_tools.ddlrun.rankexec")
    except Exception as e:
        out["shim"] = f"{type(e).__name__}: {e}"
for name in sys.argv[3:]:
    try:
        if importlib.util.find_spec(name) is None:
            out["missing"].append(name)
    except Exception:
        out["missing"].append(name)
if "mpi4py" in sys.argv[3:] and "mpi4py" not in out["missing"]:
    try:
        import mpi4py
        mpi4py.rc.initialize = mpi4py.rc.finalize = False     # the library's name only: no MPI_Init here
        from mpi4py import MPI
        out["mpi"] = MPI.Get_library_version().strip("\x00 \n").splitlines()[0].split(",")[0]
    except Exception as e:
        out["mpi_error"] = f"{type(e).__name__}: {e}"
print("WML-PROBE " + json.dumps(out))
"""


def _flavor(library_version: str) -> Optional[str]:
    """"openmpi" / "mpich" from MPI_Get_library_version's first line (MPICH-ABI kin: Cray MPICH,
    Intel MPI, MVAPICH are MPICH)."""
    text = library_version.lower()
    if "open mpi" in text:
        return "openmpi"
    if any(w in text for w in ("mpich", "intel(r) mpi", "mvapich")):
        return "mpich"
    return None


def program_imports(program: Sequence[str]) -> List[str]:
    """Top-level packages a program imports at module level: ``python x.py`` (its file, read
    here: the ranks run it from the same path) or ``python -m pkg.mod``; modules beside the
    script are its own."""
    if len(program) < 2 or "python" not in os.path.basename(program[0]):
        return []
    if program[1] == "-m" and len(program) > 2:
        return [program[2].split(".")[0]]
    script = program[1]
    if not script.endswith(".py") or not os.path.isfile(script):
        return []
    try:
        tree = ast.parse(open(script, encoding="utf-8").read(), script)
    except (OSError, SyntaxError, ValueError):
        return []          # the program says so itself when it runs
    here = os.path.dirname(os.path.abspath(script))
    full: List[str] = []
    for node in tree.body:
        if isinstance(node, ast.Import):
            full += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            full.append(node.module)
    names = [n.split(".")[0] for n in full]
    own = lambda n: os.path.exists(os.path.join(here, n + ".py")) or os.path.isdir(os.path.join(here, n))
    wanted = {n for n in names if n != "__future__" and not own(n)}
    if any(_needs_mpi(n) for n in full):      # wml's runtime, bound in, needs these from the image
        wanted |= {"numpy", "mpi4py"}
    return sorted(wanted)


def _needs_mpi(name: str) -> bool:
    """Whether importing ``name`` starts ddl_runtime's collectives (mpi4py, numpy): the runtime,
    ``ddl`` and Horovod's API do; ``ddl_runtime.core`` and ``.errors`` (what a rank shim reads) do not."""
    parts = name.split(".")
    if parts[0] in ("ddl", "horovod"):
        return True
    return parts[0] == "ddl_runtime" and (len(parts) == 1 or parts[1] not in ("core", "errors"))


def check_container(cont: ContainerLaunch, program: Sequence[str], env: Mapping[str, str],
                    launcher_mpi: Optional[str] = None, decision=None) -> None:
    """Raise one WmlError naming this node and the first thing missing.  ``env``: the launcher's
    environment; ``decision``: the launch's (the variables that cross into the container)."""
    host = socket.gethostname()
    where = f"container {cont.image} ({cont.runtime}) on {host}"
    exe = EXECUTABLES.get(cont.runtime)
    if exe is not None and shutil.which(exe) is None:
        raise WmlError(f"{where}: the runtime {exe} is not on PATH"
                       f"{f' (module load {cont.spec.modules[0]}?)' if cont.spec.modules else ''}")
    if is_path_image(cont.runtime, cont.image):
        if not os.path.exists(cont.image):
            raise WmlError(f"{where}: the image {cont.image} does not exist")
        if not os.access(cont.image, os.R_OK):
            raise WmlError(f"{where}: the image {cont.image} is not readable")
    if cont.runtime == "charliecloud":
        _charliecloud(cont, env, where)
    for b in cont.binds(env):
        if not os.path.exists(b.src):
            raise WmlError(f"{where}: bind source {b.src} does not exist on this node")
    if exe is None:          # pyxis, Container Engine: srun makes the container; nothing to run here
        return
    _probe(cont, program, env, where, launcher_mpi, decision)


def _charliecloud(cont: ContainerLaunch, env: Mapping[str, str], where: str) -> None:
    """ch-run's needs on this node: $USER, the image, and a directory for every bind: wml makes
    the ones under ch-run's /tmp (a directory of the host's), the image must have the others."""
    from . import charliecloud

    why = charliecloud.check_image_here(cont.image, cont.spec.flags, env)
    if why is not None:
        raise WmlError(f"{where}: {why}")
    tmp = charliecloud.shared_tmp(cont.spec.flags, env)
    charliecloud.make_mount_points(cont.mount_points(env))
    root = charliecloud.image_root(cont.image, cont.spec.flags, env)
    if root is None:           # a SquashFS file: ch-run says which destination it lacks
        return
    for b in cont.binds(env):
        if charliecloud.host_mount_point(b.dst, tmp) is None and not (root / b.dst.lstrip("/")).is_dir():
            raise WmlError(f"{where}: the image has no directory {b.dst} to bind {b.src} onto (ch-run mounts "
                           f"only onto directories that exist: {sh_join(['mkdir', '-p', str(root / b.dst.lstrip('/'))])}, "
                           f"or work from a directory under /tmp)")


def _probe(cont: ContainerLaunch, program: Sequence[str], env: Mapping[str, str], where: str,
           launcher_mpi: Optional[str] = None, decision=None) -> None:
    if decision is None:
        from ..rankenv import Decision

        decision = Decision()
    python = cont.spec.python
    wanted = program_imports(program)
    files = [program[0]] if program else []
    files += [a for a in program[1:2] if a.endswith(".py")]
    argv = cont.wrap([python, "-c", PROBE, "1" if cont.wml else "0", "\n".join(files), *wanted], decision, env)
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S,
                             stdin=subprocess.DEVNULL, env={**env, **cont.host_env(decision)})
    except subprocess.TimeoutExpired:
        raise WmlError(f"{where}: the image's {python} did not answer within {PROBE_TIMEOUT_S:.0f} s") from None
    except OSError as e:
        raise WmlError(f"{where}: cannot run {argv[0]}: {e.strerror}") from None
    lines = [l for l in out.stdout.splitlines() if l.startswith("WML-PROBE ")]
    if not lines:
        why = (out.stderr.strip().splitlines() or [f"exit status {out.returncode}"])[-1]
        if "No such file" in why or out.returncode in (126, 127):
            raise WmlError(f"{where}: the image has no {python} ({why.strip()})")
        raise WmlError(f"{where}: the image's {python} did not run: {why.strip()}")
    data = json.loads(lines[-1][len("WML-PROBE "):])
    if data.get("shim"):
        raise WmlError(f"{where}: wml's rank shim does not run on the image's python {data['python']}: {data['shim']}")
    if data.get("absent"):
        path = data["absent"][0]
        hint = "not on the image's PATH" if "/" not in path and not path.endswith(".py") else \
            "not visible inside (bind its directory: the site's container binds, or run from it)"
        raise WmlError(f"{where}: {path} is {hint}")
    if data.get("mpi_error"):
        raise WmlError(f"{where}: the image's mpi4py does not load its MPI library: {data['mpi_error']}")
    image_mpi = _flavor(data.get("mpi") or "")
    if launcher_mpi and image_mpi and image_mpi != launcher_mpi:
        names = {"openmpi": "Open MPI", "mpich": "MPICH"}
        raise WmlError(f"{where}: the image's MPI is {data['mpi']!r} ({names[image_mpi]}) but the launcher is "
                       f"{names[launcher_mpi]}'s mpiexec: its ranks could not join one job (use an mpiexec of "
                       f"{names[image_mpi]}: --mpiexec or WML_MPIEXEC, or an image with {names[launcher_mpi]})")
    if data.get("missing"):
        what = " ".join(program[:2])
        raise WmlError(f"{where}: the image lacks {', '.join(data['missing'])}, which {what} imports "
                       f"(python {data['python']} in the image)")


def check_image_here(cont: ContainerLaunch, env: Optional[Mapping[str, str]] = None) -> None:
    """A job of the local site, at submit: a path image must be on this machine now; ch-run's
    image (a path or a name in ch-image's storage) and $USER too."""
    if is_path_image(cont.runtime, cont.image) and not os.path.exists(cont.image):
        raise WmlError(f"--container {cont.image}: no such image on this machine ({cont.runtime})")
    if cont.runtime == "charliecloud":
        from . import charliecloud

        why = charliecloud.check_image_here(cont.image, cont.spec.flags, os.environ if env is None else env)
        if why is not None:
            raise WmlError(f"--container {cont.image} (charliecloud): {why}")


def check_job_options(cont: Optional[ContainerLaunch], stage_image: Optional[str], host_env: Optional[str]) -> None:
    """A job's options that go with a container, one WmlError each: ``--stage-image on`` needs an
    image; ``--env`` is refused with one, because the ranks run the image's python inside the
    image: an env made on this machine (its python and libraries the host's) would either not be
    there or, visible through a bind, mix the host's packages into the image's python.  An env
    for a container goes into the image (``wml env image SPEC``)."""
    if cont is None:
        if stage_image == "on":
            raise WmlError("--stage-image on goes with --container IMAGE (the image file is what is copied)")
        return
    if host_env:
        raise WmlError(f"--env {host_env} with --container {cont.image}: the ranks run the image's python, inside "
                       "the image, not an env of this machine; put the packages into the image (wml env image SPEC "
                       "--build makes one from a spec), or drop --container")
