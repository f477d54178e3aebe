"""A local conda channel with the names, versions, builds and dependencies of the packages the
curated specs (env_specs/) name, for each of their platforms, so that every conda spec is
solved in CI by py-rattler exactly as against the real channel (the real channels are not
reachable from CI).  The packages are empty archives: they are solved, never installed.

Transcribed 2026-11-28 (a subset: each package's dependencies that matter to the solve) from:
- Open-CE 1.11 (https://osuosl.org/services/powerdev/opence/, "Framework Packages"): pytorch
  2.1.2 / pytorch-base, torchvision 0.16.2, tensorflow 2.14.1 / tensorflow-base, tensorboard
  2.14.0, cudatoolkit 12.2.0, cudnn 8.9.6_12.2, nccl 2.19.3, openmpi 4.1.5, numpy 1.26.0, with
  python 3.11 from Anaconda's main channel; the GPU variants' build strings name cuda12.2.
- conda-forge (pytorch-cpu-feedstock's CUDA 12 variants: build strings cuda126_*, depends on
  cuda-version, libtorch, nccl, cudnn, __cuda; mpi4py built per MPI; the mpi-external label's
  placeholder mpich builds; the `mpi` mutex package whose mpich / openmpi builds keep two MPIs
  out of one env).
- wml-runtime's dependencies (conda-forge).
"""
from __future__ import annotations

from pathlib import Path

from local_channel import PackageSpec, build_package, write_repodata

PY311 = ["python >=3.11,<3.12.0a0", "python_abi 3.11.* *_cp311"]
PY312 = ["python >=3.12,<3.13.0a0", "python_abi 3.12.* *_cp312"]


def _python(subdir: str, version: str, abi: str) -> list[PackageSpec]:
    return [PackageSpec("python", version, "h_0_cpython", subdir, depends=["__glibc >=2.17"]),
            PackageSpec("python_abi", version.rsplit(".", 1)[0], f"8_{abi}", subdir)]


def open_ce(subdir: str) -> list[PackageSpec]:
    """Open-CE's channel plus what it needs from Anaconda main (one channel here)."""
    cuda = ["cudatoolkit >=12.2,<12.3", "__cuda >=12.2"]
    return [
        *_python(subdir, "3.11.5", "cp311"),
        PackageSpec("cudatoolkit", "12.2.0", "h_opence_0", subdir, depends=["__glibc >=2.17"]),
        PackageSpec("cudnn", "8.9.6_12.2", "h_opence_0", subdir, depends=["cudatoolkit 12.2.*"]),
        PackageSpec("nccl", "2.19.3", "cuda12.2_0", subdir, depends=["cudatoolkit 12.2.*"]),
        PackageSpec("openmpi", "4.1.5", "h_opence_0", subdir, depends=["__glibc >=2.17"]),
        PackageSpec("numpy-base", "1.26.0", "py311_0", subdir, depends=PY311),
        PackageSpec("numpy", "1.26.0", "py311_0", subdir, depends=[*PY311, "numpy-base 1.26.0 py311_0"]),
        PackageSpec("_pytorch_select", "2.0", "cuda_2", "noarch", noarch="generic"),
        PackageSpec("pytorch-base", "2.1.2", "cuda12.2_py311_1", subdir,
                    depends=[*PY311, *cuda, "cudnn >=8.9.6,<8.10", "nccl >=2.19.3,<2.20", "numpy >=1.23",
                             "openmpi 4.1.5.*", "_pytorch_select 2.0 cuda_2"]),
        PackageSpec("pytorch", "2.1.2", "cuda12.2_py311_1", subdir, depends=["pytorch-base 2.1.2 cuda12.2_py311_1"]),
        PackageSpec("torchvision-base", "0.16.2", "cuda12.2_py311_1", subdir,
                    depends=[*PY311, "pytorch-base 2.1.2.*", "numpy >=1.23", *cuda]),
        PackageSpec("torchvision", "0.16.2", "cuda12.2_py311_1", subdir,
                    depends=["torchvision-base 0.16.2 cuda12.2_py311_1"]),
        PackageSpec("_tensorflow_select", "2.0", "cuda_2", "noarch", noarch="generic"),
        PackageSpec("tensorflow-base", "2.14.1", "cuda12.2_py311_0", subdir,
                    depends=[*PY311, *cuda, "cudnn >=8.9.6,<8.10", "nccl >=2.19.3,<2.20", "numpy >=1.23,<2",
                             "_tensorflow_select 2.0 cuda_2"]),
        PackageSpec("tensorflow", "2.14.1", "cuda12.2_py311_0", subdir,
                    depends=["tensorflow-base 2.14.1 cuda12.2_py311_0", "tensorboard >=2.14,<2.15"]),
        PackageSpec("tensorboard", "2.14.0", "pyhd8ed1ab_0", "noarch", noarch="python", depends=["python >=3.9"]),
    ]


def conda_forge(subdir: str) -> list[PackageSpec]:
    """conda-forge's CUDA 12 PyTorch stack, mpi4py over MPICH, wml-runtime's packages."""
    cv = "cuda-version >=12.6,<13"
    mkl_or_generic = "mkl" if subdir == "linux-64" else "generic"
    return [
        *_python(subdir, "3.12.7", "cp312"),
        *_python(subdir, "3.11.10", "cp311"),
        PackageSpec("pip", "25.3", "pyh8b19718_0", "noarch", noarch="python", depends=["python >=3.9"]),
        PackageSpec("cuda-version", "12.6", "h7480c83_3", "noarch", noarch="generic", depends=["__cuda >=12"]),
        PackageSpec("cuda-cudart", "12.6.77", "h5888daf_0", subdir, depends=["cuda-version >=12.6,<12.7.0a0"]),
        PackageSpec("cudnn", "9.10.2.21", "hbcb9cd8_0", subdir, depends=["cuda-version >=12,<13.0a0", "__glibc >=2.28"]),
        PackageSpec("nccl", "2.28.9.1", "ha44e49d_0", subdir, depends=["cuda-version >=12,<13.0a0", "cuda-cudart"]),
        PackageSpec("numpy", "2.3.5", "py312h_0", subdir, depends=PY312),
        PackageSpec("numpy", "2.3.5", "py311h_0", subdir, depends=PY311),
        PackageSpec("libtorch", "2.9.1", f"cuda126_{mkl_or_generic}_h_300", subdir,
                    depends=[cv, "cudnn >=9.10,<10", "nccl >=2.28,<3", "__glibc >=2.28", "__cuda"]),
        PackageSpec("pytorch", "2.9.1", f"cuda126_{mkl_or_generic}_py312_h_300", subdir,
                    depends=[*PY312, cv, f"libtorch 2.9.1 cuda126_{mkl_or_generic}_h_300", "numpy >=1.23,<3",
                             "__cuda"]),
        PackageSpec("pytorch", "2.9.1", f"cpu_{mkl_or_generic}_py312_h_300", subdir,
                    depends=[*PY312, "numpy >=1.23,<3"]),
        # mpi4py, one build per MPI (conda-forge's mpi variants); 4.x over MPICH >=4, 3.1 over 3.4
        # conda-forge's MPI mutex: each MPI depends on its build of `mpi`, so two cannot coexist
        PackageSpec("mpi", "1.0", "mpich", "noarch", noarch="generic"),
        PackageSpec("mpi", "1.0", "openmpi", "noarch", noarch="generic"),
        PackageSpec("mpich", "4.3.2", "h_100", subdir, depends=["__glibc >=2.17", "mpi 1.0 mpich"]),
        PackageSpec("openmpi", "5.0.8", "h_100", subdir, depends=["__glibc >=2.17", "mpi 1.0 openmpi"]),
        PackageSpec("mpi4py", "4.1.1", "py312_mpich_h_0", subdir, depends=[*PY312, "mpich >=4.3.2,<5.0a0"]),
        PackageSpec("mpi4py", "4.1.1", "py312_openmpi_h_0", subdir, depends=[*PY312, "openmpi >=5.0.8,<6.0a0"]),
        PackageSpec("mpi4py", "4.1.1", "py311_mpich_h_0", subdir, depends=[*PY311, "mpich >=4.3.2,<5.0a0"]),
        PackageSpec("mpi4py", "3.1.6", "py312_mpich_h_0", subdir, depends=[*PY312, "mpich >=3.4.3,<5.0a0"]),
        *[PackageSpec(n, v, "pyhd8ed1ab_0", "noarch", noarch="python", depends=["python >=3.9"])
          for n, v in [("pyyaml", "6.0.3"), ("jinja2", "3.1.6"), ("pydantic", "2.12.4"), ("typer", "0.20.0"),
                       ("rich", "14.2.0"), ("platformdirs", "4.5.0")]],
    ]


def mpi_external(subdir: str) -> list[PackageSpec]:
    """conda-forge/label/mpi-external: empty placeholders standing for the system's MPI."""
    return [PackageSpec("mpich", v, "external_0", subdir, depends=["mpi 1.0 mpich"]) for v in ("3.4.3", "4.3.2")]


def _build(channel: Path, packages: list[PackageSpec]) -> Path:
    channel.mkdir(parents=True, exist_ok=True)
    seen = set()
    for spec in packages:
        key = (spec.name, spec.version, spec.build, spec.subdir)
        if key not in seen:
            seen.add(key)
            build_package(spec, channel, compresslevel=1)
    for sub in ("noarch", "linux-64", "linux-ppc64le", "linux-aarch64"):
        (channel / sub).mkdir(exist_ok=True)
    write_repodata(channel)
    return channel


#: each real channel the curated specs name -> the fixture channel standing for it
FIXTURE_FOR = {
    "https://ftp.osuosl.org/pub/open-ce/current/": "open-ce",
    "https://repo.anaconda.com/pkgs/main": "open-ce",      # Open-CE's python and numpy come from main
    "conda-forge": "conda-forge",
    "conda-forge/label/mpi-external": "mpi-external",
}


def build_curated_channels(root: Path) -> dict[str, Path]:
    """The fixture channels, by FIXTURE_FOR's names."""
    opence = [p for s in ("linux-64", "linux-ppc64le") for p in open_ce(s)]
    forge = [p for s in ("linux-64", "linux-aarch64", "linux-ppc64le") for p in conda_forge(s)]
    external = [p for s in ("linux-64", "linux-aarch64") for p in mpi_external(s)]
    return {"open-ce": _build(root / "open-ce", opence), "conda-forge": _build(root / "conda-forge", forge),
            "mpi-external": _build(root / "mpi-external", external)}
