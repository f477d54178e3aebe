"""Modulefiles loaded by the real tools: Lmod (Debian's lmod) and Environment Modules."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

LMOD_INITS = [os.environ.get("WML_TEST_LMOD_INIT", ""), "/usr/share/lmod/lmod/init/bash",
              "/usr/share/lmod/6.6/init/bash", "/opt/apps/lmod/lmod/init/bash"]
MODULECMDS = [os.environ.get("WML_TEST_MODULECMD_TCL", ""),
              "/usr/lib/x86_64-linux-gnu/modulecmd.tcl", "/usr/share/modules/libexec/modulecmd.tcl",
              "/usr/lib/modulecmd.tcl", "/opt/envmodules/usr/lib/x86_64-linux-gnu/modulecmd.tcl"]


def _first(paths: list[str]) -> str | None:
    return next((p for p in paths if p and Path(p).is_file()), None)


LMOD_INIT = _first(LMOD_INITS)
MODULECMD = _first(MODULECMDS)
TCLSH = shutil.which("tclsh")

REPORT = ('echo "PREFIX=$CONDA_PREFIX"; echo "DEFAULT=$CONDA_DEFAULT_ENV"; '
          'echo "PATH0=${PATH%%:*}"; echo "BASE=${WML_BASE_ACTIVE:-unset}"; '
          'echo "GREET=$(wml-greet)"; ')
AFTER = 'echo "AFTER_PREFIX=${CONDA_PREFIX:-unset}"; echo "AFTER_BASE=${WML_BASE_ACTIVE:-unset}"; ' \
        'echo "AFTER_PATH0=${PATH%%:*}"'


def _parse(out: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def _clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("LMOD", "MODULE", "_LMFILES", "LOADEDMODULES", "__LMOD", "__MODULES",
                                "CONDA_", "WML_BASE"))}
    env["PATH"] = "/usr/local/bin:/usr/bin:/bin"
    return env


def _check(values: dict[str, str], prefix: Path) -> None:
    assert values["PREFIX"] == str(prefix)
    assert values["DEFAULT"] == "src"
    assert values["PATH0"] == f"{prefix}/bin"
    assert values["BASE"] == "2.0"          # from the env's activate.d script, via source_sh
    assert values["GREET"] == f"greet from {prefix}"
    assert values["AFTER_PREFIX"] == "unset"
    assert values["AFTER_BASE"] == "unset"
    assert values["AFTER_PATH0"] == "/usr/local/bin"


@pytest.mark.skipif(LMOD_INIT is None, reason="Lmod is not installed (Debian: apt-get install lmod)")
def test_lmod_loads_lua_modulefile(created_env: Path, cli, tmp_path: Path):
    mpath = tmp_path / "modules"
    mpath.mkdir()
    res = cli("module", "write", "src", "--lmod", "--modulepath", mpath)
    assert res.output.strip() == str(mpath / "src.lua")
    script = (f"source {LMOD_INIT}; module use {mpath}; module load src; {REPORT}"
              f"module unload src; {AFTER}")
    proc = subprocess.run(["bash", "--noprofile", "--norc", "-c", script], capture_output=True,
                          text=True, env=_clean_env())
    assert proc.returncode == 0, proc.stderr
    _check(_parse(proc.stdout), created_env)


@pytest.mark.skipif(MODULECMD is None or TCLSH is None,
                    reason="Environment Modules' modulecmd.tcl not found. Debian's "
                           "environment-modules conflicts with lmod, so CI unpacks it beside lmod: "
                           "apt-get download environment-modules && dpkg-deb -x "
                           "environment-modules_*.deb /opt/envmodules (or set WML_TEST_MODULECMD_TCL)")
def test_environment_modules_loads_tcl_modulefile(created_env: Path, cli, tmp_path: Path):
    mpath = tmp_path / "modules"
    mpath.mkdir()
    cli("module", "write", "src", "--tcl", "--modulepath", mpath)
    assert (mpath / "src").read_text().startswith("#%Module")
    # what Environment Modules' own `module` shell function does: eval modulecmd.tcl's output
    module = f'module() {{ eval "$({TCLSH} {MODULECMD} bash "$@")"; }}; '
    script = (f"{module} export MODULEPATH={mpath}; module load src; {REPORT}"
              f"module unload src; {AFTER}")
    proc = subprocess.run(["bash", "--noprofile", "--norc", "-c", script], capture_output=True,
                          text=True, env=_clean_env())
    assert proc.returncode == 0, proc.stderr
    _check(_parse(proc.stdout), created_env)


def test_module_write_refuses_to_overwrite(created_env: Path, cli, tmp_path: Path):
    out = tmp_path / "m.lua"
    cli("module", "write", "src", "-o", out)
    res = cli("module", "write", "src", "-o", out, ok=False)
    assert res.exit_code == 2 and "already exists" in res.output
    cli("module", "write", "src", "-o", out, "--force")


def test_quoting_of_odd_prefixes():
    from wmlce_tools.env.modulefile import ModuleEnv, render_lmod, render_tcl

    env = ModuleEnv(name='we"ird', prefix=Path('/tmp/a "b" $c [d]'))
    lua = render_lmod(env)
    assert 'local prefix = "/tmp/a \\"b\\" $c [d]"' in lua
    tcl = render_tcl(env)
    assert 'set prefix "/tmp/a \\"b\\" \\$c \\[d\\]"' in tcl



LUA = shutil.which("lua") or shutil.which("lua5.3")

_TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc"))
                | st.sampled_from(list('\\"$[]{}\n\r\t ;`\'')), max_size=40)


@pytest.mark.skipif(LUA is None, reason="no lua interpreter (Debian's lmod pulls in lua5.3)")
@settings(max_examples=40, deadline=None)
@given(text=_TEXT)
def test_lua_quote_roundtrips_through_real_lua(text: str):
    from wmlce_tools.env.modulefile import lua_quote

    proc = subprocess.run([LUA, "-e", f"io.write({lua_quote(text)})"], capture_output=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.decode() == text


@pytest.mark.skipif(TCLSH is None, reason="no tclsh (Debian: apt-get install tcl)")
@settings(max_examples=40, deadline=None)
@given(text=_TEXT)
def test_tcl_quote_roundtrips_through_real_tclsh(text: str):
    from wmlce_tools.env.modulefile import tcl_quote

    script = ("fconfigure stdout -translation lf -encoding utf-8\n"
              f"puts -nonewline {tcl_quote(text)}\n")
    proc = subprocess.run([TCLSH], input=script.encode("utf-8"), capture_output=True,
                          env={**os.environ, "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.decode() == text
