"""Device families: which torch.distributed backend a device's tensors take, as plain data.

  * ``cuda``: NVIDIA; torch's ``nccl`` backend on NCCL;
  * ``rocm``: AMD; torch's HIP build sees ROCm GPUs as ``cuda`` devices and its ``nccl`` backend
    is RCCL, so ROCm tensors take the CUDA route unchanged (only the messages name RCCL);
  * ``xpu``: Intel (Aurora); torch.distributed's ``xccl`` backend on oneCCL where this torch has
    it, else host memory through the CPU engine (the host route);
  * ``cpu``: gloo (the twin CI runs every process-group path with).

`TorchBuild.of(torch)` reads what this torch was built with; `route(device, build, forced)` is a
pure function of that data and the rank's ``DDL_GPU_TRANSPORT``, so the choice is tested on any
machine.  A backend this torch lacks, where the user asked for it, is one line naming what to
install (`missing`).  `TWINS` maps a backend to the one that really opens the group: empty in a
job; CI sets ``{"xccl": "gloo"}`` to run the XPU route's code on CPU tensors.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, FrozenSet, Optional

from ...errors import DDLError, DDLInputError


@dataclass(frozen=True)
class Family:
    name: str  # cuda | rocm | xpu | cpu
    device: str  # torch's device type of its tensors (ROCm's are "cuda")
    backend: str  # torch.distributed backend of its process group
    library: str  # what the backend runs on, for messages
    install: str  # what gives a torch with that backend


FAMILIES: Dict[str, Family] = {f.name: f for f in (
    Family("cuda", "cuda", "nccl", "NCCL",
           "a CUDA build of torch (pip install torch --index-url https://download.pytorch.org/whl/cu128)"),
    Family("rocm", "cuda", "nccl", "RCCL",
           "a ROCm build of torch (pip install torch --index-url https://download.pytorch.org/whl/rocm6.4)"),
    Family("xpu", "xpu", "xccl", "oneCCL",
           "torch's XPU build with xccl (pip install torch --index-url https://download.pytorch.org/whl/xpu; "
           "on Aurora: module load frameworks)"),
    Family("cpu", "cpu", "gloo", "gloo", "a torch built with gloo (every pip wheel of torch)"),
)}

TWINS: Dict[str, str] = {}  # backend -> the backend that opens its group instead (CI: {"xccl": "gloo"})


@dataclass(frozen=True)
class TorchBuild:
    """What this torch was built with: its version, HIP or not, and its available backends."""

    version: str
    hip: Optional[str]  # torch.version.hip: set in ROCm builds
    backends: FrozenSet[str]  # the torch.distributed backends this build can open

    @classmethod
    def of(cls, torch) -> "TorchBuild":
        dist = torch.distributed
        available: FrozenSet[str] = frozenset()
        if dist.is_available():  # a torch built without distributed has no backends (and no Backend)
            names = [b for b in dist.Backend.backend_list if b not in ("undefined", "fake")]
            available = frozenset(b for b in names if dist.is_backend_available(b))
        return cls(str(torch.__version__), getattr(torch.version, "hip", None), available)

    def has(self, backend: str) -> bool:
        return TWINS.get(backend, backend) in self.backends


@dataclass(frozen=True)
class Route:
    """How one device's tensors move: through `backend`'s process group, or host memory (None)."""

    family: Family
    backend: Optional[str]
    reason: str

    def describe(self) -> str:
        how = f"torch.distributed '{self.backend}' ({self.family.library})" if self.backend else "host memory"
        return f"{self.family.name} tensors: {how}: {self.reason}"


def family_of(device: str, build: TorchBuild) -> Family:
    """The family of a tensor on torch device type `device` in this build."""
    if device == "cuda":
        return FAMILIES["rocm" if build.hip else "cuda"]
    if device in ("xpu", "cpu"):
        return FAMILIES[device]
    raise DDLInputError(f"device '{device}' is not supported: tensors on cpu, cuda (NVIDIA or ROCm) and xpu are")


def missing(family: Family, build: TorchBuild) -> str:
    """The one line for a family whose backend this torch lacks."""
    return (f"torch {build.version} has no torch.distributed '{family.backend}' backend, which {family.name} "
            f"tensors need ({family.library}); install {family.install}")


def missing_backend(backend: str, build: TorchBuild) -> str:
    """`missing` for a process group's backend name (nccl is RCCL in a ROCm build)."""
    name = {"nccl": "rocm" if build.hip else "cuda", "xccl": "xpu", "gloo": "cpu"}.get(backend)
    if name is None:
        return f"torch {build.version} has no torch.distributed '{backend}' backend"
    return missing(FAMILIES[name], build)


def route(device: str, build: TorchBuild, forced: str = "") -> Route:
    """The route of `device`'s tensors: `forced` is the rank's DDL_GPU_TRANSPORT ('' unset, 'host',
    'nccl': the family's collective library, required).  XPU without xccl falls back to host memory
    unless the library was asked for; CUDA/ROCm without nccl is an error (their host route is the
    transport's 'host', chosen by DDL_GPU_TRANSPORT=host)."""
    family = family_of(device, build)
    if forced == "ipc" and family.device != "cuda":
        raise DDLInputError(f"DDL_GPU_TRANSPORT=ipc is CUDA IPC; {family.name} tensors take nccl (their library: "
                            f"{family.library}) or host")
    if forced == "host":
        return Route(family, None, "DDL_GPU_TRANSPORT=host")
    if build.has(family.backend):
        twin = f" (opened as its twin '{TWINS[family.backend]}')" if family.backend in TWINS else ""
        return Route(family, family.backend, (f"DDL_GPU_TRANSPORT={forced}" if forced else
                                              f"torch {build.version} has '{family.backend}'") + twin)
    if family.name == "xpu" and not forced:
        return Route(family, None, f"torch {build.version} has no '{family.backend}' backend; for "
                                   f"{family.library} install {family.install}")
    raise DDLError(missing(family, build))
