"""All site profiles wml knows: bundled ones, then ``~/.config/wml/sites/*.yaml``, then each
directory of ``WML_SITE_PATH`` (later ones add to or override earlier ones by name)."""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Mapping, Optional

from ..errors import WmlError
from ..resources_data import data_dir
from .detect import local_node
from .loader import flush_cache, load_site_file, site_files
from .schema import SiteProfile, replace

DEFAULT_SITE = "local"


@dataclass(frozen=True)
class KnownSite:
    profile: SiteProfile
    source: Path


def search_dirs(env: Mapping[str, str] = os.environ) -> list[Path]:
    dirs = [data_dir("site_configs")]
    config_home = Path(env.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    dirs.append(config_home / "wml" / "sites")
    for part in env.get("WML_SITE_PATH", "").split(os.pathsep):
        if part:
            dirs.append(Path(part))
    return dirs


def known_sites(env: Mapping[str, str] = os.environ) -> Dict[str, KnownSite]:
    """The profiles that load; a file that does not is one warning (once per process), and an
    error only when its site is used (``get_site``)."""
    return _load(env)[0]


_warned: set = set()


def _load(env: Mapping[str, str], using: Optional[str] = None):
    """(sites by name, the error of each file that does not load, by the site it would name:
    its file's stem); ``using``: the site asked for, whose file's error is no warning."""
    sites: Dict[str, KnownSite] = {}
    broken: Dict[str, WmlError] = {}
    for d in search_dirs(env):
        for f in site_files(d):
            try:
                prof = load_site_file(f)
            except WmlError as e:
                broken[f.stem] = e
                if str(f) not in _warned and f.stem != using:
                    _warned.add(str(f))
                    sys.stderr.write(f"wml: warning: site file skipped: {e}\n")
                continue
            sites[prof.name] = KnownSite(prof, f)
            broken.pop(prof.name, None)
    flush_cache()
    return sites, broken


def _finish(profile: SiteProfile) -> SiteProfile:
    """Fill in what is detected at load time (the local site's cores and GPUs)."""
    if profile.node.detect:
        return replace(profile, node=local_node(profile.node))
    return profile


def get_site(name: str, env: Mapping[str, str] = os.environ) -> SiteProfile:
    sites, broken = _load(env, using=name)
    if name in broken:          # the site asked for is the one whose file is malformed
        raise broken[name]
    if name not in sites:
        import difflib

        close = difflib.get_close_matches(name, sites, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise WmlError(f"unknown site {name!r}{hint}; known sites: {', '.join(sorted(sites))}")
    return _finish(sites[name].profile)


def choose_site(explicit: Optional[str], env: Mapping[str, str] = os.environ) -> SiteProfile:
    """``--site`` > ``WML_SITE`` > detection > ``local``."""
    from .detect import detect_site

    if explicit:
        return get_site(explicit, env)
    if env.get("WML_SITE"):
        return get_site(env["WML_SITE"], env)
    detected = detect_site(known_sites(env), env)
    return get_site(detected.name if detected else DEFAULT_SITE, env)
