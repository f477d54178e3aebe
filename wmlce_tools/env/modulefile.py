"""``wml module write``: modulefiles that activate an env, for Lmod (Lua) and Tcl modules.

Sites offered WML CE as ``module load ibm-wml-ce``; these files give any wml env the same
entry point.  Loading sets what ``conda activate`` sets (CONDA_PREFIX, CONDA_DEFAULT_ENV,
CONDA_PROMPT_MODIFIER, PATH first entry) and runs the env's ``etc/conda/activate.d/*.sh``
scripts through the module tool's own ``source_sh`` / ``source-sh`` (Lmod >= 8.6, Environment
Modules >= 4.6), so unloading undoes what they set.
"""
from __future__ import annotations

import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from wmlce_tools.errors import WmlError

Flavor = Literal["lmod", "tcl"]


@dataclass
class ModuleEnv:
    name: str
    prefix: Path
    description: str = ""
    activate_scripts: list[Path] = field(default_factory=list)

    @classmethod
    def from_prefix(cls, prefix: Path, name: str | None = None) -> "ModuleEnv":
        from wmlce_tools.env.envinfo import EnvInfo
        from wmlce_tools.env.locations import env_name

        info = EnvInfo.read(prefix)
        scripts = sorted((prefix / "etc" / "conda" / "activate.d").glob("*.sh"))
        desc = f"conda environment {prefix}"
        if info and info.source:
            desc += f" (from {Path(info.source).name})"
        return cls(name=name or env_name(prefix), prefix=prefix, description=desc,
                   activate_scripts=scripts)


def lua_quote(text: str) -> str:
    """A Lua string literal for ``text``: backslash, quote and line breaks escaped."""
    out = (text.replace("\\", "\\\\").replace('"', '\\"')
           .replace("\n", "\\n").replace("\r", "\\r"))
    return f'"{out}"'


def tcl_quote(text: str) -> str:
    """A Tcl double-quoted word for ``text``: substitution characters and line breaks escaped
    (Tcl reads modulefiles with newline translation, so a raw CR would become LF)."""
    out = re.sub(r'([\\"$\[\]{}])', r"\\\1", text).replace("\n", "\\n").replace("\r", "\\r")
    return f'"{out}"'


def render_lmod(env: ModuleEnv) -> str:
    p = str(env.prefix)
    lines = [
        f"-- Lmod modulefile written by wml for conda env {env.name}",
        f"help({lua_quote('Activates the conda environment ' + p + ' (made with wml).')})",
        f"whatis({lua_quote('Name: ' + env.name)})",
        f"whatis({lua_quote('Description: ' + env.description)})",
        'family("conda_env")',
        f"local prefix = {lua_quote(p)}",
        'prepend_path("PATH", pathJoin(prefix, "bin"))',
        'setenv("CONDA_PREFIX", prefix)',
        f"setenv(\"CONDA_DEFAULT_ENV\", {lua_quote(env.name)})",
        f"setenv(\"CONDA_PROMPT_MODIFIER\", {lua_quote('(' + env.name + ') ')})",
        'setenv("CONDA_SHLVL", "1")',
    ]
    for script in env.activate_scripts:
        lines.append(f'source_sh("bash", {lua_quote(str(script))})')
    return "\n".join(lines) + "\n"


def render_tcl(env: ModuleEnv) -> str:
    p = str(env.prefix)
    lines = [
        "#%Module1.0",
        f"## Environment Modules modulefile written by wml for conda env {env.name}",
        "proc ModulesHelp { } {",
        f"    puts stderr {tcl_quote('Activates the conda environment ' + p + ' (made with wml).')}",
        "}",
        f"module-whatis {tcl_quote(env.name + ': ' + env.description)}",
        f"set prefix {tcl_quote(p)}",
        "prepend-path PATH $prefix/bin",
        "setenv CONDA_PREFIX $prefix",
        f"setenv CONDA_DEFAULT_ENV {tcl_quote(env.name)}",
        f"setenv CONDA_PROMPT_MODIFIER {tcl_quote('(' + env.name + ') ')}",
        "setenv CONDA_SHLVL 1",
    ]
    for script in env.activate_scripts:
        lines.append(f"source-sh bash {tcl_quote(str(script))}")
    return "\n".join(lines) + "\n"


def render(env: ModuleEnv, flavor: Flavor) -> str:
    return render_lmod(env) if flavor == "lmod" else render_tcl(env)


def default_filename(env: ModuleEnv, flavor: Flavor) -> str:
    base = Path(env.name).name or env.prefix.name  # envs named by path: the last component
    return f"{base}.lua" if flavor == "lmod" else base


def write_modulefile(env: ModuleEnv, flavor: Flavor, output: Path, force: bool = False) -> Path:
    output = Path(output).absolute()
    if output.exists() and not force:
        raise WmlError(f"{output} already exists (use --force to replace it)")
    if not output.parent.is_dir():
        raise WmlError(f"cannot write {output}: directory {output.parent} does not exist")
    if not os.access(output.parent, os.W_OK):
        raise WmlError(f"cannot write {output}: directory {output.parent} is not writable")
    fd, tmp = tempfile.mkstemp(prefix=f".{output.name}.", dir=output.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(render(env, flavor))
        os.chmod(tmp, 0o644)
        os.replace(tmp, output)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return output
