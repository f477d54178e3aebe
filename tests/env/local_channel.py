"""Build a small, real conda channel offline (used by the tests and by benchmarks/env_bench.py).

Every package is a real ``.tar.bz2`` conda archive with ``info/index.json``, ``info/paths.json``,
``info/files`` and, where a file embeds its install prefix, ``info/has_prefix`` with a
placeholder that the installer rewrites; each subdir gets a ``repodata.json``.

Packages
--------
noarch        wml-greet 1.0   bin/wml-greet prints its prefix; depends on wml-core
noarch        wml-base 1.0, 2.0  etc/conda/activate.d/wml-base.sh (sets WML_BASE_ACTIVE)
linux-64      wml-core 1.0    bin/wml-core prints platform + prefix; depends on wml-base >=2, __glibc >=2.17
linux-ppc64le wml-core 1.0    same for ppc64le
linux-64      python 3.11     a venv-style interpreter (symlink to this machine's python + pyvenv.cfg)
linux-ppc64le python 3.11     placeholder script (never run here)
linux-64      wml-broken 1.0  paths.json names a file the archive lacks: linking it fails
noarch        wml-pyutil 1.0  noarch: python (site-packages/ relocated into lib/pythonX.Y/)
"""
from __future__ import annotations

import hashlib
import io
import json
import sys
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

PLACEHOLDER = "/opt/wml_build_placeholder_" + "p" * 60  # long, like conda-build's
GLIBC_DEP = "__glibc >=2.17"


@dataclass
class FileSpec:
    path: str
    data: bytes
    mode: int = 0o644
    has_prefix: bool = False
    symlink_to: str | None = None


@dataclass
class PackageSpec:
    name: str
    version: str
    build: str
    subdir: str
    depends: list[str] = field(default_factory=list)
    files: list[FileSpec] = field(default_factory=list)
    noarch: str | None = None
    missing_in_archive: list[str] = field(default_factory=list)  # listed but absent -> link fails


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _add(tar: tarfile.TarFile, name: str, data: bytes, mode: int = 0o644) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = mode
    info.mtime = 1_700_000_000
    tar.addfile(info, io.BytesIO(data))


def build_package(spec: PackageSpec, channel: Path, compresslevel: int = 9) -> Path:
    """Write one ``.tar.bz2`` conda package into ``channel/<subdir>/`` (``compresslevel``:
    bz2's, 1-9; the cache-check benchmark builds hundreds of packages at 1)."""
    subdir_dir = channel / spec.subdir
    subdir_dir.mkdir(parents=True, exist_ok=True)
    index = {
        "name": spec.name,
        "version": spec.version,
        "build": spec.build,
        "build_number": 0,
        "depends": spec.depends,
        "subdir": spec.subdir,
        "license": "BSD-3-Clause",
        "timestamp": 1_700_000_000_000,
    }
    if spec.noarch:
        index["noarch"] = spec.noarch
    else:
        index["platform"] = "linux"
        index["arch"] = {"linux-64": "x86_64", "linux-ppc64le": "ppc64le", "linux-aarch64": "aarch64"}[spec.subdir]
    paths = []
    has_prefix_lines = []
    for f in spec.files:
        if f.symlink_to is not None:
            paths.append({"_path": f.path, "path_type": "softlink",
                          "sha256": _sha256(f.symlink_to.encode()), "size_in_bytes": len(f.symlink_to)})
            continue
        entry = {"_path": f.path, "path_type": "hardlink", "sha256": _sha256(f.data),
                 "size_in_bytes": len(f.data)}
        if f.has_prefix:
            entry["prefix_placeholder"] = PLACEHOLDER
            entry["file_mode"] = "text"
            has_prefix_lines.append(f"{PLACEHOLDER} text {f.path}")
        paths.append(entry)
    for missing in spec.missing_in_archive:
        paths.append({"_path": missing, "path_type": "hardlink", "sha256": "0" * 64, "size_in_bytes": 3})
    fn = f"{spec.name}-{spec.version}-{spec.build}.tar.bz2"
    out = subdir_dir / fn
    with tarfile.open(out, "w:bz2", compresslevel=compresslevel) as tar:
        _add(tar, "info/index.json", json.dumps(index, indent=2).encode())
        _add(tar, "info/paths.json", json.dumps({"paths": paths, "paths_version": 1}, indent=2).encode())
        listed = [p["_path"] for p in paths]
        _add(tar, "info/files", ("\n".join(listed) + "\n").encode())
        if has_prefix_lines:
            _add(tar, "info/has_prefix", ("\n".join(has_prefix_lines) + "\n").encode())
        if spec.noarch == "python":  # as conda-build writes it; conda-pack reads it
            _add(tar, "info/link.json", json.dumps(
                {"noarch": {"type": "python"}, "package_metadata_version": 1}).encode())
        for f in spec.files:
            if f.symlink_to is not None:
                info = tarfile.TarInfo(f.path)
                info.type = tarfile.SYMTYPE
                info.linkname = f.symlink_to
                info.mtime = 1_700_000_000
                tar.addfile(info)
            else:
                _add(tar, f.path, f.data, f.mode)
    return out


def _script(body: str) -> bytes:
    return ("#!/bin/sh\n" + body).encode()


def fixture_packages() -> list[PackageSpec]:
    pkgs: list[PackageSpec] = []
    for version in ("1.0", "2.0"):
        pkgs.append(PackageSpec(
            "wml-base", version, "0", "noarch", noarch="generic",
            files=[FileSpec("etc/conda/activate.d/wml-base.sh",
                            f"export WML_BASE_ACTIVE={version}\n".encode()),
                   FileSpec("share/wml-base/VERSION", f"{version}\n".encode())]))
    pkgs.append(PackageSpec(
        "wml-greet", "1.0", "0", "noarch", noarch="generic", depends=["wml-core >=1.0"],
        files=[FileSpec("bin/wml-greet", _script(f'echo "greet from {PLACEHOLDER}"\n'),
                        mode=0o755, has_prefix=True)]))
    for subdir in ("linux-64", "linux-ppc64le"):
        pkgs.append(PackageSpec(
            "wml-core", "1.0", "h0", subdir, depends=["wml-base >=2", GLIBC_DEP],
            files=[FileSpec("bin/wml-core",
                            _script(f'echo "wml-core {subdir} prefix={PLACEHOLDER}"\n'),
                            mode=0o755, has_prefix=True),
                   FileSpec("share/wml-core/config.txt",
                            f"prefix={PLACEHOLDER}\n".encode(), has_prefix=True)]))
    # A real interpreter, laid out like a venv so that its sys.prefix is the env.
    real_python = Path(sys.base_prefix) / "bin" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
    pyver = f"{sys.version_info[0]}.{sys.version_info[1]}"
    home = Path(sys.base_prefix) / "bin"
    pkgs.append(PackageSpec(
        "python", f"{pyver}.{sys.version_info[2]}", "h0_wmltest", "linux-64",
        # a symlink, as `python -m venv` makes: works whatever RPATH the real binary has
        files=[FileSpec(f"bin/python{pyver}", b"", symlink_to=str(real_python.resolve())),
               FileSpec("bin/python3", b"", symlink_to=f"python{pyver}"),
               FileSpec("bin/python", b"", symlink_to=f"python{pyver}"),
               FileSpec("pyvenv.cfg",
                        f"home = {home}\ninclude-system-site-packages = false\nversion = {pyver}\n".encode()),
               FileSpec(f"lib/python{pyver}/site-packages/wml_conda_owned.py",
                        b"OWNED_BY_CONDA = True\n")]))
    pkgs.append(PackageSpec(
        "python", f"{pyver}.{sys.version_info[2]}", "h0_wmltest", "linux-ppc64le",
        files=[FileSpec("bin/python", _script("echo ppc64le python\n"), mode=0o755)]))
    pkgs.append(PackageSpec(
        "wml-pyutil", "1.0", "pyh0", "noarch", noarch="python", depends=["python >=3.8"],
        files=[FileSpec("site-packages/wml_pyutil/__init__.py",
                        b"import sys\n\nWHERE = sys.prefix\n")]))
    pkgs.append(PackageSpec(
        "wml-broken", "1.0", "0", "linux-64", depends=["wml-core"],
        files=[FileSpec("share/wml-broken/ok.txt", b"ok\n")],
        missing_in_archive=["share/wml-broken/missing.txt"]))
    return pkgs


def write_repodata(channel: Path) -> None:
    """repodata.json for every subdir, from each archive's info/index.json plus its hashes.

    (rattler.index.index_fs writes the same, but py-rattler 0.28 sometimes crashes at
    interpreter exit after it has run -- its background threads outlive Python -- which would
    turn a passing pytest run into a crash, so the index is written here.)
    """
    for subdir_dir in sorted(p for p in channel.iterdir() if p.is_dir()):
        packages = {}
        for archive in sorted(subdir_dir.glob("*.tar.bz2")):
            data = archive.read_bytes()
            with tarfile.open(archive, "r:bz2") as tar:
                index = json.load(tar.extractfile("info/index.json"))
            index.update(md5=hashlib.md5(data).hexdigest(), sha256=_sha256(data), size=len(data))
            packages[archive.name] = index
        repodata = {"info": {"subdir": subdir_dir.name}, "packages": packages,
                    "packages.conda": {}, "removed": [], "repodata_version": 1}
        (subdir_dir / "repodata.json").write_text(json.dumps(repodata, indent=1, sort_keys=True))


def build_channel(channel: Path) -> Path:
    """Build the whole fixture channel at ``channel`` and index it; returns ``channel``."""
    channel.mkdir(parents=True, exist_ok=True)
    for subdir in ("noarch", "linux-64", "linux-ppc64le"):
        (channel / subdir).mkdir(exist_ok=True)
    for spec in fixture_packages():
        build_package(spec, channel)
    write_repodata(channel)
    return channel


def build_wheel(workdir: Path, name: str = "wml_hello", version: str = "0.1") -> Path:
    """Build a tiny pure-Python wheel with a console script, offline, with pip + setuptools."""
    import subprocess

    src = workdir / f"{name}-src"
    pkg = src / name
    pkg.mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text(
        "import sys\n\ndef main():\n    print('hello from', sys.prefix)\n")
    (src / "pyproject.toml").write_text(
        "[build-system]\nrequires = ['setuptools']\nbuild-backend = 'setuptools.build_meta'\n\n"
        f"[project]\nname = '{name.replace('_', '-')}'\nversion = '{version}'\n\n"
        f"[project.scripts]\n{name.replace('_', '-')} = '{name}:main'\n")
    dist = workdir / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "--no-index", "-q", "-w", str(dist), str(src)], check=True)
    return next(dist.glob(f"{name}-{version}-*.whl"))


if __name__ == "__main__":  # python tests/env/local_channel.py DIR
    out = build_channel(Path(sys.argv[1]).resolve())
    print(out)
