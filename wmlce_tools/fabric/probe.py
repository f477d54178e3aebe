"""Is the collective library's network plugin on this node, and can it be loaded?  Standard
library only: ``ddlrun --check`` runs ``python -m wmlce_tools.fabric.probe SPEC`` on every
host, and ddlrun looks here before a multi-node launch.

The plugin is looked for where the library's ``dlopen`` finds it: the file ``NCCL_NET_PLUGIN``
names (a path; a word such as ``ofi`` names ``libnccl-net-ofi.so``), the directories of ``LD_LIBRARY_PATH`` (the ranks' value, which the fabric may
have prepended to), the profile's ``paths``, then the system's library directories.  The
libfabric provider (``cxi`` on Slingshot) is looked for with ``fi_info -l`` where it exists."""
from __future__ import annotations

import ctypes
import json
import os
import shutil
import subprocess
import sys
from typing import Dict, List, Mapping, Optional, Sequence

SYSTEM_DIRS = ("/usr/lib64", "/usr/lib", "/lib64", "/lib", "/usr/local/lib")
FI_INFO_TIMEOUT_S = 10.0


def search_dirs(paths: Sequence[str], env: Mapping[str, str]) -> List[str]:
    dirs = [d for d in env.get("LD_LIBRARY_PATH", "").split(":") if d]
    return list(dict.fromkeys([*dirs, *paths, *SYSTEM_DIRS]))


def find_plugin(library: str, paths: Sequence[str], env: Mapping[str, str]) -> Optional[str]:
    """The plugin file the library would load, or None."""
    named = env.get("NCCL_NET_PLUGIN", "")
    if "/" in named:
        return named if os.path.isfile(named) else None
    # NCCL_NET_PLUGIN=ofi names libnccl-net-ofi.so (RCCL: librccl-net-ofi.so) as well
    names = [*(f"lib{lib}-net-{named}.so" for lib in ("nccl", "rccl") if named), library]
    for d in search_dirs(paths, env):
        for name in names:
            f = os.path.join(d, name)
            if os.path.isfile(f):
                return f
    return None


def load_error(path: str) -> Optional[str]:
    """None when the file loads (its own dependencies found), else why not."""
    try:
        ctypes.CDLL(path)
    except OSError as e:
        return str(e)
    return None


def provider_present(name: str) -> Optional[bool]:
    """Whether libfabric lists the provider (None: no fi_info here to ask)."""
    exe = shutil.which("fi_info")
    if exe is None:
        return None
    try:
        out = subprocess.run([exe, "-l"], capture_output=True, text=True, timeout=FI_INFO_TIMEOUT_S,
                             stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return any(line.strip().rstrip(":").split(";")[0] == name for line in out.stdout.splitlines())


def probe(spec: Mapping, env: Mapping[str, str]) -> Dict[str, object]:
    """``spec``: library, paths, provider, ld_library_path (the ranks' value, if ddlrun sets one)."""
    look = dict(env)
    if spec.get("ld_library_path") is not None:
        look["LD_LIBRARY_PATH"] = str(spec["ld_library_path"])
    found = find_plugin(str(spec["library"]), list(spec.get("paths", ())), look)
    out: Dict[str, object] = {"plugin": found}
    if found is not None:
        out["load_error"] = load_error(found)
    if spec.get("provider"):
        out["provider"] = provider_present(str(spec["provider"]))
    return out


def main(argv: Sequence[str]) -> int:
    print(json.dumps(probe(json.loads(argv[0]), os.environ)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
