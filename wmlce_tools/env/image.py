"""``wml env image SPEC|LOCK``: a container image definition rendered from a curated spec or a
lock, so that the curated env and the image hold the same packages (issue 49, item 4).

Two definitions into one directory, with the env's own file beside them (the build context):

- ``Containerfile`` (podman, buildah, Charliecloud's ``ch-image``, docker): ``FROM`` the base,
  ``COPY`` the env file, ``RUN`` the install, ``ENV PATH``;
- ``<name>.def`` (Apptainer / SingularityCE): ``Bootstrap: docker``, ``From:``, ``%files``,
  ``%post``, ``%environment``, ``%labels``.

What is installed, and how:

- a conda spec: its channels, packages and pip section as an ``environment.yml``, created by
  ``micromamba create -p /opt/env -f`` in the base ``mambaorg/micromamba`` (solved at build time);
- a conda-lock lockfile (``wml env lock``): the same packages as the curated env, installed by
  ``micromamba create -p /opt/env -f <name>-lock.yml`` (micromamba reads conda-lock files whose
  name ends in ``-lock.yml``; it takes the build machine's platform);
- a PyPI spec (``kind: pypi``) or requirements file: a venv at /opt/env in ``python:<version>-slim``,
  ``pip install -r requirements.txt`` (the spec's index as ``--index-url``).

Every image gets ``/opt/wml/wmlce_tools`` and ``/opt/wml/ddl_runtime``: where ``--container``
binds wml's rank shim where a site's profile puts it there (``wml_dir``); Charliecloud needs
them no more (wml binds onto mount points under ch-run's /tmp).

``build`` runs the builder found on the machine (or the one named), in the order apptainer,
singularity, podman, buildah, ch-image, and says which; ``run_hint`` is its last line, how to
run the image with ``wml submit --container``.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import List, Mapping, Optional, Tuple

import yaml

from wmlce_tools.errors import WmlError

MICROMAMBA_BASE = "mambaorg/micromamba:2.0.5"
ENV_PREFIX = "/opt/env"
WML_DIRS = "/opt/wml/wmlce_tools /opt/wml/ddl_runtime"
BUILDERS = ("apptainer", "singularity", "podman", "buildah", "ch-image")


@dataclass(frozen=True)
class ImageDefinition:
    name: str
    base: str
    env_file: str           # the file copied into the image (in the build context)
    env_text: str
    install: Tuple[str, ...]   # shell lines run in the image, in order
    source: str             # the spec or lock it came from (a comment and a label)

    def containerfile(self) -> str:
        run = " && \\\n    ".join(self.install)
        return (f"# {self.name}: rendered by `wml env image` from {self.source}\n"
                f"FROM {self.base}\n"
                "USER root\n"                 # micromamba's images run as mambauser: /opt is root's
                f"COPY {self.env_file} /opt/wml-env/{self.env_file}\n"
                f"RUN {run}\n"
                f"ENV PATH={ENV_PREFIX}/bin:$PATH\n"
                f'LABEL wml.env="{self.name}"\n')

    def apptainer_def(self) -> str:
        post = "\n".join(f"    {line}" for line in self.install)
        return (f"# {self.name}: rendered by `wml env image` from {self.source}\n"
                f"Bootstrap: docker\nFrom: {self.base}\n\n"
                f"%files\n    {self.env_file} /opt/wml-env/{self.env_file}\n\n"
                f"%post\n{post}\n\n"
                f"%environment\n    export PATH={ENV_PREFIX}/bin:$PATH\n\n"
                f"%labels\n    wml.env {self.name}\n")

    def write(self, out: Path) -> List[Path]:
        """The build context: the two definitions and the env file (rewritten each time)."""
        out.mkdir(parents=True, exist_ok=True)
        files = [(out / "Containerfile", self.containerfile()), (out / f"{self.name}.def", self.apptainer_def()),
                 (out / self.env_file, self.env_text)]
        for path, text in files:
            tmp = path.with_name(f".{path.name}.tmp")
            tmp.write_text(text)
            os.replace(tmp, path)
        return [p for p, _ in files]


def _is_conda_lock(path: Path) -> bool:
    from wmlce_tools.env.lockfiles import lock_kind

    return lock_kind(path) == "conda"


def definition(spec_or_lock: str, base: Optional[str] = None, name: Optional[str] = None) -> ImageDefinition:
    """The image definition of a bundled spec's name, a spec file or a conda-lock lockfile."""
    path = Path(spec_or_lock)
    from wmlce_tools.env.pylock import is_pylock

    if is_pylock(path) or path.suffix == ".toml":
        raise WmlError(f"{spec_or_lock}: a pylock.toml is not rendered into an image yet; give its spec "
                       "(kind: pypi) or a requirements file")
    wml_dirs = f"mkdir -p {WML_DIRS}"
    if _is_conda_lock(path):
        stem = path.name.split(".")[0]          # my-env-lock.yml: my-env; conda-lock.yml: env
        env_name = name or (stem.removesuffix("-lock") if stem not in ("conda-lock", "lock") else "env")
        file = f"{env_name}-lock.yml"     # micromamba reads a conda-lock file by this ending
        return ImageDefinition(name=env_name, base=base or MICROMAMBA_BASE, env_file=file, env_text=path.read_text(),
                               install=(f"micromamba create -y -p {ENV_PREFIX} -f /opt/wml-env/{file}",
                                        "micromamba clean -a -y", wml_dirs),
                               source=str(path))
    from wmlce_tools.env.spec import find_spec, load_spec

    spec_path = find_spec(spec_or_lock)
    spec = load_spec(spec_path)
    env_name = name or spec.name
    if hasattr(spec, "requirements"):     # PyPI: a venv
        index = [f"--index-url {spec.index}"] if spec.index else []
        pip = " ".join([f"{ENV_PREFIX}/bin/pip", "install", "--no-cache-dir", *index, "-r",
                        "/opt/wml-env/requirements.txt"])
        return ImageDefinition(name=env_name, base=base or f"python:{spec.python}-slim", env_file="requirements.txt",
                               env_text="".join(f"{r}\n" for r in spec.requirements),
                               install=(f"python3 -m venv {ENV_PREFIX}", pip, wml_dirs), source=str(spec_path))
    deps: list = [e.spec for e in spec.packages if e.platforms is None or "linux-64" in e.platforms]
    if spec.pip:
        deps.append({"pip": list(spec.pip)})
    env = {"name": env_name, "channels": list(spec.channels), "dependencies": deps}
    return ImageDefinition(name=env_name, base=base or MICROMAMBA_BASE, env_file="environment.yml",
                           env_text=yaml.safe_dump(env, sort_keys=False),
                           install=(f"micromamba create -y -p {ENV_PREFIX} -f /opt/wml-env/environment.yml",
                                    "micromamba clean -a -y", wml_dirs),
                           source=str(spec_path))


def find_builder(wanted: Optional[str] = None) -> Tuple[str, str]:
    """(builder, its path): the one named, else the first of BUILDERS on PATH; one line if none."""
    if wanted is not None and wanted not in BUILDERS:
        raise WmlError(f"--builder {wanted!r}: one of {', '.join(BUILDERS)}")
    for name in ([wanted] if wanted else BUILDERS):
        exe = shutil.which(name)
        if exe:
            return name, exe
    if wanted:
        raise WmlError(f"--builder {wanted}: {wanted} is not on PATH")
    raise WmlError(f"no image builder on PATH (looked for {', '.join(BUILDERS)}); the definitions are "
                   "written: build them where one is installed")


def _interpreter(builder: str, exe: str) -> List[str]:
    """ch-image is a Python program started by ``env python3``: under wml's venv (or a pyenv
    shim) that finds a python without ch-image's modules, so it runs with the python3 installed
    beside it (Debian's /usr/bin/python3 for /usr/bin/ch-image) when there is one."""
    if builder == "ch-image":
        beside = os.path.join(os.path.dirname(exe), "python3")
        if os.access(beside, os.X_OK):
            return [beside, exe]
    return [exe]


def build_command(builder: str, exe: str, d: ImageDefinition, out: Path, tag: str) -> List[str]:
    if builder in ("apptainer", "singularity"):
        return [exe, "build", str(out / f"{d.name}.sif"), str(out / f"{d.name}.def")]
    return [*_interpreter(builder, exe), "build", "-t", tag, "-f", str(out / "Containerfile"), str(out)]


def build(d: ImageDefinition, out: Path, builder: Optional[str], tag: Optional[str]) -> str:
    """Build the image with the builder found; returns what was built (a .sif, or a tag)."""
    name, exe = find_builder(builder)
    tag = tag or d.name
    cmd = build_command(name, exe, d, out, tag)
    print(f"wml: building {d.name} with {name} ({exe}): {' '.join(cmd)}", file=sys.stderr, flush=True)
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True)
    (out / "build.log").write_text(proc.stdout)
    if proc.returncode:
        lines = [ln for ln in proc.stdout.strip().splitlines() if ln.strip()]
        raise WmlError(f"{name} build failed (exit {proc.returncode}): {lines[-1] if lines else 'no output'}; "
                       f"its output is in {out / 'build.log'}")
    return str(out / f"{d.name}.sif") if name in ("apptainer", "singularity") else f"{tag} ({name})"


def run_hint(built: str, environ: Optional[Mapping[str, str]] = None) -> str:
    """The build's last line: how to run what ``build`` returned (a .sif, or ``TAG (builder)``)
    with ``wml submit`` (each runtime gives the ranks the image's PATH, /opt/env/bin first)."""
    from wmlce_tools.quoting import sh_quote

    env = os.environ if environ is None else environ
    if not built.endswith(")"):
        return (f"wml: run it: wml submit --container {sh_quote(os.path.abspath(built))} PROGRAM "
                "(Apptainer; at a centre, copy the .sif there)")
    tag, builder = built[:-1].rsplit(" (", 1)
    if builder == "ch-image":
        storage = env.get("CH_IMAGE_STORAGE") or f"/var/tmp/{env.get('USER') or '$USER'}.ch"
        return (f"wml: run it: wml submit --container {sh_quote(tag)} PROGRAM (Charliecloud: ch-run finds it in "
                f"ch-image's storage {storage}; by hand: ch-run --set-env {sh_quote(tag)} -- python3 ...)")
    return (f"wml: run it: wml submit --container-runtime podman --container {sh_quote('localhost/' + tag)} PROGRAM "
            f"(podman, on this machine; at a centre, push it to a registry its runtime pulls from)")
