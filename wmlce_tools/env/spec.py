"""The environment spec: wml's own YAML format and plain conda ``environment.yml``.

A wml spec (``env_specs/*.yaml``)::

    name: wml-ce-pytorch            # env name (required)
    version: "1.6.2"                # version of the curated stack
    description: ...
    channels: [conda-forge]         # names or URLs (https://, file://), highest priority first
    platforms: [linux-64, linux-ppc64le]
    virtual_packages:               # what the solver may assume on the target machines
      __glibc: "2.17"
      __cuda: "10.2"
    packages:                       # conda match specs
      - python 3.7.*
      - pytorch 1.3.1
      - powerai-license  # [ppc64le]          <- conda-style selector comment
      - {spec: "cudatoolkit 10.2.*", platforms: [linux-64]}   <- explicit platform list
    pip:                            # installed with the env's own python after the conda part
      - horovod==0.19.0
    pip_index: https://download.pytorch.org/whl/rocm7.1   # the pip section's index (optional)
    imports: [torch, horovod.torch] # what `wml env verify` imports in the env's python
    source: https://...             # where the stack is published (the page it was checked against)
    checked: 2026-11-28             # the day it was checked
    legacy: true                    # kept for old jobs; nobody can install it today

A PyPI spec (``kind: pypi``) names no channels: ``requirements`` (or ``requirements_file``) are
locked by uv into a PEP 751 ``pylock.toml`` and installed into a virtualenv (``pypi_env``).

A plain conda ``environment.yml`` (``name``, ``channels``, ``dependencies`` with an optional
``- pip: [...]`` entry, ``platforms``) is read the same way conda-lock reads it.

Selectors follow conda-lock's (``linux``, ``unix``, ``linux64``, ``ppc64le``, ...).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from wmlce_tools.errors import WmlError
from wmlce_tools.env.spec_fields import check_cuda_builds, provenance, str_list

if TYPE_CHECKING:  # pragma: no cover
    from wmlce_tools.env.pypi_spec import PypiSpec

SUPPORTED_PLATFORMS = ("linux-64", "linux-ppc64le", "linux-aarch64", "osx-64", "osx-arm64")

# Same table as conda-lock's src_parser.selectors (kept here so parsing a spec does not import
# conda-lock, which takes about a second).
_SELECTORS = {
    "linux-64": {"linux64", "unix", "linux", "x86_64", "x86"},
    "linux-aarch64": {"aarch64", "unix", "linux"},
    "linux-ppc64le": {"ppc64le", "unix", "linux"},
    "osx-64": {"osx64", "osx", "unix"},
    "osx-arm64": {"arm64", "osx", "unix"},
}
_SELECTOR_RE = re.compile(r"#\s*\[([^\[\]]+)\]\s*$")

# Default virtual packages per platform, as conda-lock's default-virtual-packages.yaml has them;
# a spec's virtual_packages override or extend these.
DEFAULT_VIRTUAL_PACKAGES: dict[str, dict[str, str]] = {
    "linux-64": {"__unix": "0", "__linux": "5.10", "__glibc": "2.28", "__archspec": "1 x86_64"},
    "linux-ppc64le": {"__unix": "0", "__linux": "5.10", "__glibc": "2.28", "__archspec": "1 ppc64le"},
    "linux-aarch64": {"__unix": "0", "__linux": "5.10", "__glibc": "2.28", "__archspec": "1 aarch64"},
    "osx-64": {"__unix": "0", "__osx": "11.0", "__archspec": "1 x86_64"},
    "osx-arm64": {"__unix": "0", "__osx": "11.0", "__archspec": "1 arm64"},
}


@dataclass(frozen=True)
class PackageEntry:
    """One conda match spec, limited to some platforms (None: all)."""

    spec: str
    platforms: frozenset[str] | None = None
    selector: str | None = None

    def applies_to(self, platform: str) -> bool:
        if self.platforms is not None and platform not in self.platforms:
            return False
        if self.selector is not None:
            return _selector_matches(self.selector, platform)
        return True


@dataclass
class EnvSpec:
    name: str
    channels: list[str]
    platforms: list[str]
    packages: list[PackageEntry]
    pip: list[str] = field(default_factory=list)
    imports: list[str] = field(default_factory=list)
    virtual_packages: dict[str, str] = field(default_factory=dict)
    version: str | None = None
    description: str = ""
    source: Path | None = None
    pip_index: str | None = None    # the pip section's index URL (PyTorch's ROCm / XPU wheels)
    origin: str = ""                # where the stack is published (spec key ``source``)
    checked: str = ""               # the day that was checked (spec key ``checked``)
    legacy: bool = False

    def packages_for(self, platform: str) -> list[str]:
        self.check_platform(platform)
        return [p.spec for p in self.packages if p.applies_to(platform)]

    def virtual_packages_for(self, platform: str) -> dict[str, str]:
        out = dict(DEFAULT_VIRTUAL_PACKAGES.get(platform, {"__unix": "0"}))
        out.update(self.virtual_packages)
        return out

    def check_platform(self, platform: str) -> None:
        if platform not in self.platforms:
            raise WmlError(
                f"platform {platform!r} is not one of spec {self.name!r}'s platforms "
                f"({', '.join(self.platforms)})")


def _selector_matches(selector: str, platform: str) -> bool:
    words = _SELECTORS.get(platform, set())
    expr = selector.strip()
    if expr.startswith("not "):
        return expr[4:].strip() not in words
    return expr in words


# ---------------------------------------------------------------- loading with line numbers

class _LineLoader(yaml.SafeLoader):
    """SafeLoader that remembers the line of every sequence item and mapping value."""


def _construct_seq(loader: _LineLoader, node: yaml.SequenceNode) -> list[Any]:
    items = loader.construct_sequence(node, deep=True)
    return _LineList(items, [n.start_mark.line + 1 for n in node.value])


def _construct_map(loader: _LineLoader, node: yaml.MappingNode) -> dict[str, Any]:
    loader.flatten_mapping(node)
    out = _LineDict()
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        out[key] = loader.construct_object(value_node, deep=True)
        out.lines[key] = key_node.start_mark.line + 1
    return out


class _LineList(list):
    def __init__(self, items: list[Any], lines: list[int]) -> None:
        super().__init__(items)
        self.lines = lines


class _LineDict(dict):
    def __init__(self) -> None:
        super().__init__()
        self.lines: dict[Any, int] = {}


_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, _construct_seq)
_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_map)


class _Where:
    def __init__(self, path: Path, text: str) -> None:
        self.path = path
        self.lines = text.splitlines()

    def error(self, line: int | None, message: str) -> WmlError:
        loc = f"{self.path}:{line}" if line else str(self.path)
        return WmlError(f"{loc}: {message}")

    def comment_selector(self, line: int) -> str | None:
        if 1 <= line <= len(self.lines):
            m = _SELECTOR_RE.search(self.lines[line - 1])
            if m:
                return m.group(1)
        return None


def load_spec(path: Path) -> "EnvSpec | PypiSpec":
    """Read a wml spec (conda, or ``kind: pypi``), a conda environment.yml or a pip
    requirements file; errors name file:line."""
    path = Path(path)
    if path.suffix in (".txt", ".in"):
        from wmlce_tools.env.pypi_spec import from_requirements_file

        return from_requirements_file(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise WmlError(f"spec file {path} not found") from None
    except OSError as exc:
        raise WmlError(f"cannot read spec file {path}: {exc.strerror}") from None
    where = _Where(path, text)
    try:
        data = yaml.load(text, Loader=_LineLoader)  # noqa: S506 - SafeLoader subclass
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        if exc.context_mark is not None and "<stream end>" in str(exc.problem):
            mark = exc.context_mark  # an unclosed bracket: point at where it opened
        line = mark.line + 1 if mark else None
        raise where.error(line, f"malformed YAML: {exc.problem or exc.context}") from None
    except yaml.YAMLError as exc:
        raise where.error(None, f"malformed YAML: {exc}") from None
    if not isinstance(data, dict):
        raise where.error(1, "expected a mapping with name, channels and packages")
    kind = data.get("kind", "conda")
    if kind == "pypi":
        from wmlce_tools.env.pypi_spec import from_wml_yaml

        return from_wml_yaml(data, where)
    if kind != "conda":
        raise where.error(data.lines.get("kind"), f"unknown spec kind {kind!r} (conda or pypi)")
    if "dependencies" in data and "packages" not in data:
        return _from_environment_yml(data, where)
    return _from_wml_spec(data, where)


def _platforms(data: _LineDict, where: _Where) -> list[str]:
    platforms = str_list(data, "platforms", where) or ["linux-64", "linux-ppc64le"]
    for p in platforms:
        if p not in SUPPORTED_PLATFORMS:
            raise where.error(data.lines.get("platforms"),
                              f"unknown platform {p!r} (known: {', '.join(SUPPORTED_PLATFORMS)})")
    return platforms


def _common(data: _LineDict, where: _Where) -> dict[str, Any]:
    name = data.get("name")
    if not isinstance(name, str) or not name.strip():
        raise where.error(data.lines.get("name"), "missing or empty 'name'")
    if not re.fullmatch(r"[A-Za-z0-9._+-]+", name):
        raise where.error(data.lines.get("name"), f"env name {name!r} may only hold letters, digits and ._+-")
    channels = str_list(data, "channels", where)
    if "nodefaults" in channels:
        channels.remove("nodefaults")
    if not channels:
        raise where.error(data.lines.get("channels"), "at least one channel is needed")
    vps = data.get("virtual_packages") or {}
    if not isinstance(vps, dict) or not all(str(k).startswith("__") for k in vps):
        raise where.error(data.lines.get("virtual_packages"),
                          "virtual_packages must map names starting with '__' to versions")
    return {"name": name, "channels": channels, "platforms": _platforms(data, where),
            "virtual_packages": {str(k): str(v) for k, v in vps.items()},
            "source": where.path, **provenance(data, where)}


def _parse_entry(item: Any, line: int, where: _Where, platforms: list[str]) -> PackageEntry:
    if isinstance(item, (str, int, float)):
        spec = str(item).strip()
        _check_matchspec(spec, line, where)
        return PackageEntry(spec, None, where.comment_selector(line))
    if isinstance(item, dict) and "spec" in item:
        spec = str(item["spec"]).strip()
        _check_matchspec(spec, line, where)
        plats = item.get("platforms")
        if plats is not None:
            if not isinstance(plats, list):
                raise where.error(line, "'platforms' of a package must be a list")
            for p in plats:
                if p not in platforms:
                    raise where.error(line, f"package platform {p!r} is not in the spec's platforms")
            plats = frozenset(str(p) for p in plats)
        return PackageEntry(spec, plats, item.get("selector"))
    raise where.error(line, f"a package must be a match spec string or {{spec: ..., platforms: [...]}}, "
                            f"got {item!r}")


def _check_matchspec(spec: str, line: int, where: _Where) -> None:
    from rattler import MatchSpec  # lazy: rattler's extension takes a moment to load

    try:
        MatchSpec(spec, strict=False)
    except Exception as exc:  # rattler raises its own InvalidMatchSpecError
        raise where.error(line, f"not a conda match spec {spec!r}: {str(exc).splitlines()[0]}") from None


def _from_wml_spec(data: _LineDict, where: _Where) -> EnvSpec:
    common = _common(data, where)
    raw = data.get("packages")
    if not isinstance(raw, list) or not raw:
        raise where.error(data.lines.get("packages"), "'packages' must be a non-empty list")
    packages = [_parse_entry(item, line, where, common["platforms"])
                for item, line in zip(raw, raw.lines)]
    version = data.get("version")
    pip_index = data.get("pip_index")
    if pip_index is not None and not (isinstance(pip_index, str) and re.match(r"^(https?|file)://", pip_index)):
        raise where.error(data.lines.get("pip_index"), f"'pip_index' must be an http(s):// or file:// URL, got {pip_index!r}")
    spec = EnvSpec(packages=packages, pip=str_list(data, "pip", where),
                   imports=str_list(data, "imports", where),
                   version=None if version is None else str(version), pip_index=pip_index,
                   description=str(data.get("description") or ""), **common)
    check_cuda_builds(spec, f"{where.path}:{data.lines.get('packages', 1)}")
    return spec


def _from_environment_yml(data: _LineDict, where: _Where) -> EnvSpec:
    common = _common(data, where)
    deps = data.get("dependencies")
    if not isinstance(deps, list):
        raise where.error(data.lines.get("dependencies"), "'dependencies' must be a list")
    packages: list[PackageEntry] = []
    pip: list[str] = []
    for item, line in zip(deps, deps.lines):
        if isinstance(item, dict) and "pip" in item:
            pip_items = item["pip"] or []
            if not isinstance(pip_items, list):
                raise where.error(line, "'pip' must be a list of requirements")
            pip.extend(str(p) for p in pip_items)
            continue
        packages.append(_parse_entry(item, line, where, common["platforms"]))
    if pip and not any(p.spec.split()[0] == "pip" for p in packages):
        packages.append(PackageEntry("pip"))  # conda-lock adds pip too when there is a pip section
    spec = EnvSpec(packages=packages, pip=pip, imports=str_list(data, "imports", where), **common)
    check_cuda_builds(spec, f"{where.path}:{data.lines.get('dependencies', 1)}")
    return spec


# ---------------------------------------------------------------- bundled specs

def bundled_specs_dir() -> Path:
    """``env_specs/``: the repo folder in a checkout, ``wmlce_tools.env_specs`` when installed."""
    from wmlce_tools.resources_data import data_dir

    return data_dir("env_specs")


def bundled_spec_paths() -> list[Path]:
    d = bundled_specs_dir()
    return sorted(d.glob("*.yaml")) if d.is_dir() else []


def find_spec(name_or_path: str) -> Path:
    """A spec file path, or the name of a bundled spec (file stem or its ``name:``)."""
    p = Path(name_or_path)
    if p.suffix in (".yaml", ".yml", ".txt", ".in") or p.exists():
        if not p.exists():
            raise WmlError(f"spec file {p} not found")
        return p
    for path in bundled_spec_paths():
        if path.stem == name_or_path:
            return path
    for path in bundled_spec_paths():
        try:
            if load_spec(path).name == name_or_path:
                return path
        except WmlError:
            continue
    known = ", ".join(p.stem for p in bundled_spec_paths()) or "none"
    raise WmlError(f"unknown spec {name_or_path!r} (not a file; bundled specs: {known})")
