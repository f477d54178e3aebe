"""``wml env repair``: put back the package files ``wml env verify`` finds missing or changed.

The packages that own them are reinstalled in place by rattler (``reinstall_packages``), from
the package cache after its check (``linking``: a cache entry damaged by an edit made through a
hard link is re-extracted first), with the env's own path written into the files.  pip
packages and files no package owns are left alone.  The env is checked again afterwards:
anything still wrong is an error that names the package and the file.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from wmlce_tools.env.create import current_platform, install_records
from wmlce_tools.env.installed import conda_records, env_platform
from wmlce_tools.env.linking import LinkChoice, LinkPolicy
from wmlce_tools.env.verify import FileProblem, VerifyReport, check_files
from wmlce_tools.errors import WmlError


@dataclass
class RepairResult:
    prefix: Path
    total_packages: int
    files_checked: int
    packages: list[str] = field(default_factory=list)    # name-version-build reinstalled
    fixed: list[FileProblem] = field(default_factory=list)
    link: LinkChoice | None = None


def repair_env(prefix: Path, link: LinkPolicy = LinkPolicy.auto, progress: bool = False) -> RepairResult:
    prefix = Path(prefix).absolute()
    before = VerifyReport(prefix=prefix)
    check_files(prefix, before)
    result = RepairResult(prefix, before.packages, before.files_checked)
    if not before.file_problems:
        return result
    records = conda_records(prefix)
    broken = {fp.package for fp in before.file_problems}
    names = {r.name.normalized for r in records if f"{r.name.normalized}-{r.version}-{r.build}" in broken}
    platform = env_platform(records) or current_platform()
    result.link = install_records(records, prefix, prefix, platform, progress, f"repairing {prefix.name}",
                                  link=link, installed=records, reinstall=names)
    after = VerifyReport(prefix=prefix)
    check_files(prefix, after)
    if after.file_problems:
        fp = after.file_problems[0]
        raise WmlError(f"{prefix}: {fp.package}: {fp.path} is still {fp.problem} after reinstalling "
                       f"{', '.join(sorted(broken))}; re-create the env")
    result.packages = sorted(broken)
    result.fixed = before.file_problems
    return result
