"""All site profiles wml knows: bundled ones, then ``~/.config/wml/sites/*.yaml``, then each
directory of ``WML_SITE_PATH`` (later ones add to or override earlier ones by name)."""
from __future__ import annotations

import os
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
    sites: Dict[str, KnownSite] = {}
    for d in search_dirs(env):
        for f in site_files(d):
            prof = load_site_file(f)
            sites[prof.name] = KnownSite(prof, f)
    flush_cache()
    return sites


def _finish(profile: SiteProfile) -> SiteProfile:
    """Fill in what is detected at load time (the local site's cores and GPUs)."""
    if profile.node.detect:
        return replace(profile, node=local_node(profile.node))
    return profile


def get_site(name: str, env: Mapping[str, str] = os.environ) -> SiteProfile:
    sites = known_sites(env)
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
