"""Whether an environment's GPU stack fits a site's GPUs (``wml env create ... --site S``).

A spec or lock names its accelerator build in its packages (``spec_fields.accelerator_builds``:
CUDA N, ROCm, XPU); a site's GPUs are told by its profile: the variable that narrows a rank to
its GPUs (``gpu_env``: CUDA_VISIBLE_DEVICES on NVIDIA's, ROCR_VISIBLE_DEVICES on AMD's,
ZE_AFFINITY_MASK on Intel's) on a node with GPUs.  A CUDA build on Frontier's AMD GPUs, or
PyTorch's ROCm wheels on Polaris' NVIDIA ones, would install and then run on the CPU alone (or
not import): refused in one line, naming the bundled specs that fit.
"""
from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from wmlce_tools.errors import WmlError
from wmlce_tools.env.spec_fields import accelerator_builds

#: the GPU stack of each ``gpu_env`` (the site schema's choices)
FAMILY_OF_GPU_ENV = {"CUDA_VISIBLE_DEVICES": "CUDA", "ROCR_VISIBLE_DEVICES": "ROCm", "ZE_AFFINITY_MASK": "XPU"}
VENDOR = {"CUDA": "NVIDIA", "ROCm": "AMD", "XPU": "Intel"}
PYPI_INDEXES = ("https://pypi.org/simple", "https://pypi.python.org/simple")


@dataclass
class _Texts:
    """What ``accelerator_builds`` reads, from a lock's packages."""

    requirements: list[str] = field(default_factory=list)


def site_family(site: Any) -> Optional[str]:
    """CUDA, ROCm or XPU: the builds the site's GPUs run; None for a site without GPUs."""
    if site.node.gpus == 0:
        return None
    return FAMILY_OF_GPU_ENV.get(site.gpu_env)


def _torch_from_pypi(spec: Any) -> list[str]:
    """torch requirements installed from PyPI itself, whose Linux wheels are CUDA builds (the
    nvidia-*-cu12 wheels come with them)."""
    index = getattr(spec, "index", None) if hasattr(spec, "requirements") else getattr(spec, "pip_index", None)
    if index and index.rstrip("/") not in PYPI_INDEXES:
        return []
    reqs = list(getattr(spec, "requirements", None) or getattr(spec, "pip", None) or [])
    out = []
    for req in reqs:
        name = req.split(";")[0].strip().split("[")[0]
        for cut in "=<>~! ":
            name = name.split(cut)[0]
        if name.lower() == "torch" and "+" not in req:      # a local version (+cpu, +rocm6.2) says its own build
            out.append(req)
    return out


def lock_texts(path: Path) -> _Texts:
    """A lockfile's package names and file names (conda-lock YAML or a pylock.toml)."""
    texts: list[str] = []
    text = Path(path).read_text()
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        import yaml

        data = yaml.safe_load(text) or {}
        for pkg in data.get("package") or []:
            texts += [str(pkg.get("name", "")), Path(str(pkg.get("url", ""))).name]
        return _Texts(texts)
    for pkg in data.get("packages") or []:
        texts.append(str(pkg.get("name", "")))
        texts += [Path(str(w.get("url") or w.get("name") or "")).name for w in pkg.get("wheels") or []]
    index = ((data.get("tool") or {}).get("wml") or {}).get("index")
    if index:
        texts.append(index)
    return _Texts(texts)


def check_fits(site: Any, spec: Any = None, lockfile: Optional[Path] = None) -> None:
    """WmlError when ``spec`` (an EnvSpec or PypiSpec) or ``lockfile`` is built for other GPUs than
    ``site``'s."""
    family = site_family(site)
    if family is None:
        return
    builds = accelerator_builds(spec if spec is not None else lock_texts(lockfile))
    if spec is not None:
        pypi_torch = _torch_from_pypi(spec)
        if pypi_torch and not builds:
            builds = {"CUDA": {f"{r} from PyPI, whose Linux wheels are CUDA builds" for r in pypi_torch}}
    wrong = {k: v for k, v in builds.items() if k.split()[0] != family}
    if not wrong:
        return
    kind = sorted(wrong)[0]
    what = f"spec {spec.name!r}" if spec is not None else f"lock {lockfile}"
    fitting = _fitting_specs(family)
    hint = f": use a spec built for {family} (bundled: {', '.join(fitting)})" if fitting else \
        f": use a spec built for {family}"
    raise WmlError(f"{what} is built for {kind} ({', '.join(sorted(wrong[kind]))}), but site {site.name}'s GPUs are "
                   f"{VENDOR[family]}'s, which run {family} builds (its profile's gpu_env: {site.gpu_env}){hint}")


def _fitting_specs(family: str) -> list[str]:
    from wmlce_tools.env.spec import bundled_spec_paths, load_spec

    out = []
    for path in bundled_spec_paths():
        try:
            spec = load_spec(path)
        except WmlError:
            continue
        if getattr(spec, "legacy", False):
            continue
        kinds = {k.split()[0] for k in accelerator_builds(spec)}
        if kinds == {family}:
            out.append(spec.name)
    return out
