"""The container a job's ranks run in, and how each runtime wraps one rank's command.

The host's launcher (srun, mpiexec, PALS) starts one container per rank; inside, the image's
python runs wml's rank shim (``wmlce_tools.ddlrun.rankexec``), which is pure Python and is bound
read-only into the image with ``ddl_runtime`` (``wml_dir`` on PYTHONPATH), so the Layout, GPU
binding and torchrun variables are the same inside as outside.  Per runtime (flags as in each
tool's manual; the site's own flags, binds, variables and modules come from its profile):

- apptainer / singularity: ``apptainer exec [flags] -B SRC:DST[:ro] IMAGE CMD`` (binds $HOME,
  $PWD and /tmp itself; LD_LIBRARY_PATH goes in as APPTAINERENV_LD_LIBRARY_PATH);
- shifter: ``#SBATCH --image=IMAGE`` (+ ``#SBATCH --module=...``), each rank
  ``shifter --image=IMAGE [--module=a,b] -V SRC:DST[:ro] CMD`` (NERSC's Perlmutter launchers page);
- podman-hpc / podman: ``podman-hpc run --rm [--mpi --gpu --nccl] -v SRC:DST[:ro] -w WORKDIR
  [-e NAME]... IMAGE CMD`` (podman passes no variable by itself, so the image's ENV stands:
  podman-hpc's --mpi module passes the launcher's, wml names the job's; plain podman is given
  the launchers' and wml's by prefix, ``-e 'OMPI_*'``, never ``--env-host``, which would put the
  host's PATH over the image's);
- pyxis (enroot): no wrapper command; ``srun --container-image=IMAGE
  --container-mounts=SRC:DST[:ro],... --container-workdir=WORKDIR`` (pyxis' usage page);
- container-engine (CSCS): no wrapper command; ``srun --environment=EDF``, where the EDF is one
  wml writes (``edf_text``: the image, or ``base_environment`` of the user's EDF, plus the
  mounts, [env] and the site's [annotations], e.g. the aws_ofi_nccl hook);
- charliecloud: ``ch-run [flags] --unset-env=... --set-env=PATH=... [--set-env] -b SRC:DST -c
  WORKDIR IMAGE -- CMD``: any image ch-run runs (a directory, a SquashFS file, a name in ch-image's
  storage); the image's environment (/ch/environment) over the host's, which ch-run passes on;
  wml's packages bound onto mount points under ch-run's own /tmp (``charliecloud.py``), so the
  image needs no directory of wml's (ch-run mounts only onto directories that exist; it has no
  read-only bind).

Inside every runtime the rank's python is the image's (``spec.python`` found on the image's
PATH), never one of the host's PATH: Apptainer, podman and pyxis give the image's PATH
themselves; ch-run is told to (above).

The launch plan (``wmlce_tools/launch``) builds the one ContainerLaunch of a launch, with the
fabric's binds and switches (``with_fabric``), and hands each method its decision: the values for
inside the container (``decision.inside``: Apptainer's ``APPTAINERENV_NAME`` on the host, podman's
``-e NAME=VALUE``, ch-run's ``--set-env``, the EDF's ``[env]``, else ``env NAME=VALUE`` before
the shim) and the names of the variables the ranks read (podman-hpc's ``-e NAME``).
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from ..errors import WmlError
from ..rankenv import CONTRACT
from ..site.container_schema import ContainerRuntime
from ..site.schema import SiteProfile
from . import charliecloud

EDF_PLACEHOLDER = "<EDF written by ddlrun>"
NONE_WORDS = ("none", "off", "no")

EXECUTABLES = {"apptainer": "apptainer", "singularity": "singularity", "shifter": "shifter",
               "podman-hpc": "podman-hpc", "podman": "podman", "charliecloud": "ch-run"}
# plain podman: the launchers' rank variables and wml's, by prefix (podman's -e NAME* form)
PODMAN_PREFIXES = ("OMPI_*", "PMIX_*", "PMI_*", "HYDRA_*", "MPI_LOCAL*", "SLURM_*", "PALS_*", "WML_*", "DDL_*")
# runtimes that do not put the job's working directory into the container themselves
BIND_WORKDIR = ("charliecloud", "podman", "podman-hpc", "pyxis", "container-engine")

_SCHEME = re.compile(r"^(docker|docker-archive|docker-daemon|oci|oci-archive|oras|library|shub)://\S+$")
_REF = re.compile(r"^(docker://)?[A-Za-z0-9][A-Za-z0-9._/:@+-]*$")
_SHIFTER = re.compile(r"^((docker|custom|id):)?[A-Za-z0-9][A-Za-z0-9._/-]*(:[A-Za-z0-9._-]+)?$")
_PYXIS_REF = re.compile(r"^([A-Za-z0-9._-]+@)?([A-Za-z0-9._:-]+#)?[A-Za-z0-9][A-Za-z0-9._/-]*(:[A-Za-z0-9._-]+)?$")
_EDF_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
# CSCS EDF "image": [USER@][REGISTRY#]IMAGE[:TAG] (nvcr.io#nvidia/pytorch:25.06-py3), or REGISTRY/REPO:TAG as
# CSCS's own examples spell it (nvcr.io/nvidia/pytorch:25.11-py3)
_EDF_IMAGE = re.compile(r"^([A-Za-z0-9._-]+@)?([A-Za-z0-9._:-]+#)?[A-Za-z0-9][A-Za-z0-9._/:@+-]*$")

FORMS = {
    "apptainer": "docker://REPO:TAG, oras://..., library://..., or a .sif file / sandbox directory",
    "singularity": "docker://REPO:TAG, oras://..., library://..., or a .sif file / sandbox directory",
    "shifter": "a Shifter image name: REPO:TAG or docker:REPO:TAG (pulled with shifterimg pull)",
    "podman-hpc": "an image name: [REGISTRY/]REPO[:TAG] (podman-hpc migrate'd for the compute nodes)",
    "podman": "an image name: [REGISTRY/]REPO[:TAG]",
    "pyxis": "[USER@][REGISTRY#]IMAGE[:TAG] (an enroot URI) or a squashfs file (.sqsh)",
    "container-engine": "an EDF: its name in $EDF_PATH (~/.edf) or a .toml path, or an image "
                        "([USER@][REGISTRY#]IMAGE[:TAG], REGISTRY/REPO:TAG or a .sqsh file) for which wml writes the EDF",
    "charliecloud": "an image directory (ch-convert / a rootfs), a SquashFS file (.sqfs) or an image's name "
                    "in ch-image's storage",
}


@dataclass(frozen=True)
class Bind:
    src: str
    dst: str
    ro: bool = False

    @classmethod
    def parse(cls, text: str) -> "Bind":
        parts = text.split(":")
        ro = parts[-1] == "ro" and len(parts) > 1
        if ro:
            parts = parts[:-1]
        if len(parts) > 2 or not parts[0]:
            raise WmlError(f"bind {text!r}: expected SRC, SRC:DST or SRC:DST:ro")
        return cls(parts[0], parts[1] if len(parts) == 2 else parts[0], ro)

    def spelled(self, ro_word: str = ":ro", short: bool = False) -> str:
        if short and self.src == self.dst and not self.ro:      # apptainer -B /opt
            return self.src
        return f"{self.src}:{self.dst}{ro_word if self.ro else ''}"

    def expanded(self, env: Mapping[str, str]) -> "Bind":
        return Bind(_expand(self.src, env), _expand(self.dst, env), self.ro)


def _expand(text: str, env: Mapping[str, str]) -> str:
    return re.sub(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?", lambda m: env.get(m.group(1), m.group(0)), text)


def wml_root() -> str:
    """The directory that holds wml's packages (wmlce_tools and ddl_runtime)."""
    return str(Path(__file__).resolve().parent.parent.parent)


def is_path_image(runtime: str, image: str) -> bool:
    """Whether ``image`` names a file or directory on the node (checked there) rather than
    something the runtime pulls or looks up."""
    if runtime == "charliecloud" and _SCHEME.match(image):
        return False
    if image.startswith(("/", "./", "../", "~")):
        return True
    if runtime in ("apptainer", "singularity"):
        return not _SCHEME.match(image)
    if runtime == "pyxis":
        return image.endswith((".sqsh", ".squashfs"))
    if runtime == "container-engine":
        return image.endswith((".toml", ".sqsh", ".squashfs"))
    if runtime == "charliecloud":      # as ch-run takes it: a path that exists, else a name in ch-image's storage
        return image.endswith((".sqfs", ".squashfs")) or os.path.exists(image)
    return False


def check_image(runtime: str, image: str, site: str) -> str:
    """``image`` as ``runtime`` names one (a path made absolute; a path may hold spaces), or one
    WmlError."""
    if not image or image.startswith("-") or any(c in image for c in "\n\r\t\0"):
        raise WmlError(f"--container {image!r}: not an image name for {runtime} on {site} "
                       f"(expected {FORMS[runtime]})")
    if runtime == "charliecloud" and _SCHEME.match(image):
        ref = image.split("://", 1)[1]
        raise WmlError(f"--container {image}: ch-run pulls no image itself; pull it into ch-image's storage "
                       f"(ch-image pull {ref}) and give its name (--container {ref}), or give an image directory")
    if is_path_image(runtime, image):
        path = os.path.abspath(os.path.expanduser(image))
        if runtime == "charliecloud" and os.path.isfile(path) and not charliecloud.is_squashfs(path):
            raise WmlError(f"--container {image}: not an image for charliecloud on {site}: a file that is not "
                           f"SquashFS (expected {FORMS[runtime]})")
        return path
    ok = {"shifter": _SHIFTER, "podman-hpc": _REF, "podman": _REF, "pyxis": _PYXIS_REF,
          "container-engine": _EDF_IMAGE, "charliecloud": _REF}.get(runtime)
    if runtime in ("apptainer", "singularity"):
        ok = _SCHEME
    if any(c.isspace() for c in image):      # a name (not a path) holds no space
        ok = None
    if ok is None or not ok.match(image):
        raise WmlError(f"--container {image!r}: not an image name for {runtime} on {site} "
                       f"(expected {FORMS[runtime]})")
    return image


@dataclass(frozen=True)
class ContainerLaunch:
    """One job's container: what runs, where, and what goes in.  The variables come from the
    launch plan's decision (``wmlce_tools/launch``): ``inside`` values cross into the container
    in the runtime's own way, ``names`` are what a runtime that passes nothing by itself is told
    to pass."""

    runtime: str
    image: str
    spec: ContainerRuntime
    workdir: str
    wml: Optional[str] = None                 # host directory of wml's packages, bound in (None: not bound)
    extra_binds: Tuple[str, ...] = ()         # from elsewhere (the fabric section), as SRC[:DST[:ro]]
    options: Tuple[Tuple[str, str], ...] = ()   # the fabric's runtime switches (shifter.module, CE annotations)
    edf_path: Optional[str] = None            # container-engine: the EDF wml wrote

    def with_fabric(self, fabric) -> "ContainerLaunch":
        """This container with the fabric's binds (the network plugin's libraries) and switches."""
        import dataclasses

        have = {b.rstrip("/") for b in (*self.spec.binds, *self.extra_binds)}
        binds = tuple(b for b in fabric.binds if b.rstrip("/") not in have)   # a page may name one the runtime's did
        return dataclasses.replace(self, extra_binds=(*self.extra_binds, *binds),
                                   options=(*self.options, *fabric.container_options))

    def with_bind(self, path: str) -> "ContainerLaunch":
        """This container with ``path`` bound in where it is, unless a bind already holds it."""
        import dataclasses

        norm = path.rstrip("/")
        for b in (*self.spec.binds, *self.extra_binds):
            src = Bind.parse(b).src.rstrip("/")
            if norm == src or norm.startswith(src + "/"):
                return self
        return dataclasses.replace(self, extra_binds=(*self.extra_binds, path))

    # -- what goes in ----------------------------------------------------------------------
    @property
    def wml_dir(self) -> str:
        """Where wml's packages are inside: the profile's ``wml_dir``; for ch-run, mount points
        under its own /tmp (unless the profile gives it a private /tmp), which every image has."""
        if self.runtime == "charliecloud" and charliecloud.shared_tmp(self.spec.flags, {}) is not None:
            return charliecloud.wml_dir()
        return self.spec.wml_dir

    def binds(self, env: Mapping[str, str] = {}) -> List[Bind]:
        out = [Bind.parse(b).expanded(env) for b in (*self.spec.binds, *self.extra_binds)]
        if self.wml is not None:
            out += [Bind(os.path.join(self.wml, pkg), f"{self.wml_dir}/{pkg}", True)
                    for pkg in ("wmlce_tools", "ddl_runtime")]
        if self.runtime in BIND_WORKDIR and not any(b.dst == self.workdir for b in out):
            out.append(Bind(self.workdir, self.workdir))
        if self.runtime == "charliecloud":     # a path under /tmp is there already when ch-run's /tmp is the host's
            tmp = charliecloud.shared_tmp(self.spec.flags, env)
            out = [b for b in out if not charliecloud.visible_as_is(b.src, b.dst, tmp)]
        return out

    def mount_points(self, env: Mapping[str, str] = {}) -> List[str]:
        """ch-run: the host directories that are the binds' destinations under its /tmp (made on
        each node before any rank starts: ``charliecloud.make_mount_points``)."""
        if self.runtime != "charliecloud":
            return []
        tmp = charliecloud.shared_tmp(self.spec.flags, env)
        return [p for p in (charliecloud.host_mount_point(b.dst, tmp) for b in self.binds(env)) if p]

    @property
    def env_prefix(self) -> Optional[str]:
        return {"apptainer": "APPTAINERENV_", "singularity": "SINGULARITYENV_"}.get(self.runtime)

    def inside_set(self, environ: Mapping[str, str]) -> Dict[str, str]:
        """Variables for inside the container that the user already set in the runtime's own
        way (``APPTAINERENV_NAME``): they win over the plan's."""
        prefix = self.env_prefix
        if prefix is None:
            return {}
        return {k[len(prefix):]: v for k, v in environ.items() if k.startswith(prefix)}

    def host_env(self, decision) -> Dict[str, str]:
        """The launcher's variables that carry ``decision.inside`` into the container
        (Apptainer resets LD_LIBRARY_PATH inside; ``APPTAINERENV_NAME`` sets it there)."""
        prefix = self.env_prefix
        if prefix is None:
            return {}
        return {f"{prefix}{k}": v for k, v in decision.inside}

    def runtime_modules(self) -> List[str]:
        """Shifter's modules: the site's, then the fabric's (``shifter.module: gpu,nccl-plugin``)."""
        out: Dict[str, None] = dict.fromkeys(self.spec.runtime_modules)
        for key, value in self.options:
            if key == "shifter.module":
                out.update(dict.fromkeys(m.strip() for m in value.split(",") if m.strip()))
        return list(out)

    def annotations(self) -> Dict[str, str]:
        """The Container Engine's EDF annotations: the site's, then the fabric's (its hooks)."""
        out = dict(self.spec.annotations)
        out.update((k, v) for k, v in self.options if k.split(".")[0] not in EXECUTABLES)
        return out

    def pythonpath(self, host_value: str = "") -> str:
        """PYTHONPATH inside: entries of the host's that lie in wml's packages (the Horovod
        and LMS shims) moved to where the packages are bound, then ``wml_dir``."""
        if self.wml is None:
            return host_value
        out = []
        for entry in filter(None, host_value.split(os.pathsep)):
            rel = os.path.relpath(entry, self.wml)
            if rel.split(os.sep)[0] in ("wmlce_tools", "ddl_runtime"):
                out.append(f"{self.wml_dir}/{rel}")
        return os.pathsep.join([*out, self.wml_dir])

    # -- the rank's command ----------------------------------------------------------------
    def inner(self, argv: Sequence[str], decision, env: Mapping[str, str] = {}) -> List[str]:
        """``argv`` as it runs inside: ``env NAME=VALUE ... argv`` with PYTHONPATH when wml is
        bound in, and the inside values of runtimes that have no way of their own to set them."""
        sets = []
        if self.wml is not None:
            sets.append(f"PYTHONPATH={self.pythonpath(env.get('PYTHONPATH', ''))}")
        if self.runtime in ("shifter", "pyxis"):
            sets += [f"{k}={v}" for k, v in decision.inside]
        return ["env", *sets, *argv] if sets else list(argv)

    def wrap(self, argv: Sequence[str], decision, env: Mapping[str, str] = {}) -> List[str]:
        """One rank's command in the container (what follows the launcher's own flags);
        ``env``: the launcher's environment (binds' and PYTHONPATH's $VARIABLES)."""
        rt, spec, image = self.runtime, self.spec, self.image
        inner = self.inner(argv, decision, env)
        binds = self.binds(env)
        if rt in ("apptainer", "singularity"):
            return [rt, "exec", *spec.flags, *_flagged("-B", [b.spelled(short=True) for b in binds]), image, *inner]
        if rt == "shifter":
            mods = self.runtime_modules()
            return ["shifter", f"--image={image}", *([f"--module={','.join(mods)}"] if mods else []), *spec.flags,
                    *_flagged("-V", [b.spelled() for b in binds]), *inner]
        if rt in ("podman-hpc", "podman"):
            inside = [f"{k}={v}" for k, v in decision.inside]
            # podman passes no variable by itself: podman-hpc is told each one the ranks read, by
            # name; plain podman the launchers' and wml's by prefix (never --env-host: the host's PATH)
            # (podman's -e NAME passes nothing for an unset NAME; -e 'WML_PARAM_*' every one of them)
            names = sorted({*CONTRACT, *decision.names, *(n for n, _ in decision.rank), *(n for n, _ in decision.host)}
                           - {k for k, _ in decision.inside})
            envs = [*_flagged("-e", [*(PODMAN_PREFIXES if rt == "podman" else ()), *names]), *_flagged("-e", inside)]
            return [rt, "run", "--rm", *spec.flags, *envs, *_flagged("-v", [b.spelled() for b in binds]),
                    "-w", self.workdir, image, *inner]
        if rt == "charliecloud":
            return ["ch-run", *spec.flags, *charliecloud.env_flags(image, spec.flags, {**os.environ, **env}),
                    *[f"--set-env={k}={v}" for k, v in decision.inside],
                    *_flagged("-b", [b.spelled("") for b in binds]), "-c", self.workdir, image, "--", *inner]
        return inner          # pyxis, container-engine: srun's own flags do it (launcher_args)

    def launcher_args(self, decision, env: Mapping[str, str] = {}) -> List[str]:
        """Flags for the launcher itself (srun's pyxis and Container Engine options)."""
        if self.runtime == "pyxis":
            mounts = ",".join(b.spelled() for b in self.binds(env))
            return [f"--container-image={self.image}", *([f"--container-mounts={mounts}"] if mounts else []),
                    f"--container-workdir={self.workdir}", *self.spec.flags]
        if self.runtime == "container-engine":
            return [f"--environment={self.edf_path or EDF_PLACEHOLDER}", *self.spec.flags]
        return []

    # -- the job script ------------------------------------------------------------------
    def directives(self, scheduler: str) -> List[str]:
        """Header lines the runtime needs (Shifter: the image and its modules, for the job)."""
        if self.runtime != "shifter" or scheduler != "slurm":
            return []
        out = [f"#SBATCH --image={self.image}"]
        mods = self.runtime_modules()
        if mods:
            out.append(f"#SBATCH --module={','.join(mods)}")
        return out

    # -- CSCS Container Engine ---------------------------------------------------------------
    def edf_text(self, decision, env: Mapping[str, str] = {}) -> Optional[str]:
        """The EDF wml writes for the Container Engine (None for the other runtimes): a user's
        EDF (a name or .toml) is its base_environment, anything else is the image; the inside
        values as its [env], the site's and the fabric's hooks as its [annotations]."""
        if self.runtime != "container-engine":
            return None
        img = self.image
        if img.endswith(".toml") or _EDF_NAME.match(img):
            head = f"base_environment = {_toml(img)}"
        else:
            head = f"image = {_toml(img)}"
        lines = [head, f"workdir = {_toml(self.workdir)}",
                 "mounts = [" + ", ".join(_toml(b.spelled()) for b in self.binds(env)) + "]"]
        if decision.inside:
            lines += ["", "[env]"] + [f"{k} = {_toml(v)}" for k, v in decision.inside]
        notes = self.annotations()
        if notes:
            lines += ["", "[annotations]"] + [f"{_toml(k)} = {_toml(v)}" for k, v in notes.items()]
        return "\n".join(lines) + "\n"


def _flagged(flag: str, values: Sequence[str]) -> List[str]:
    out: List[str] = []
    for v in values:
        out += [flag, v]
    return out


def _toml(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def choose(site: SiteProfile, image: Optional[str], runtime: Optional[str]) -> Optional[Tuple[str, str]]:
    """(runtime, image) a job uses: ``--container IMAGE`` or the site's default image, in
    ``--container-runtime`` or the site's default runtime; None for no container.  One
    WmlError for a site without containers, an unknown runtime or a malformed image."""
    if image is not None and image.strip().lower() in NONE_WORDS:
        if runtime is not None:
            raise WmlError(f"--container-runtime {runtime} with --container {image}: give an image, or neither")
        return None
    cont = site.container
    if image is None:
        if cont is None or cont.image is None:
            if runtime is not None:
                raise WmlError(f"--container-runtime {runtime} goes with --container IMAGE")
            return None
        image = cont.image
    if cont is None:
        raise WmlError(f"--container: site {site.name} has no container runtime (its profile has no "
                       f"container: section); run without --container, or add one (wml site schema)")
    name = runtime or cont.runtime
    if name not in cont.runtimes:
        raise WmlError(f"--container-runtime {name!r}: site {site.name} offers {', '.join(cont.runtimes)}")
    return name, check_image(name, image, site.name)


def container_launch(site: SiteProfile, image: Optional[str], runtime: Optional[str],
                     workdir: str) -> Optional[ContainerLaunch]:
    """The ContainerLaunch of a job on ``site`` (None without a container)."""
    chosen = choose(site, image, runtime)
    if chosen is None:
        return None
    name, img = chosen
    spec = site.container.runtimes[name]
    return ContainerLaunch(runtime=name, image=img, spec=spec, workdir=os.path.abspath(workdir),
                           wml=wml_root() if spec.bind_wml else None)
