"""What a new user meets first (issue 33): virtualenvs as --env, a rendered chain script whose log
is not lost, a submit from a host that is not the site's, and the command line's own errors
(-h everywhere, one line with "did you mean", whole columns when piped, "1 rank")."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from test_cli import one_line_error


@pytest.fixture
def prog(tmp_path):
    p = tmp_path / "where.py"
    p.write_text("import os, sys\nprint('prefix', sys.prefix, 'venv', os.environ.get('VIRTUAL_ENV'), flush=True)\n")
    return p


@pytest.fixture
def venv(tmp_path):
    path = tmp_path / "my venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True, timeout=120)
    return path


# -- item 4: virtualenvs ------------------------------------------------------------------------

def test_a_venv_is_activated_in_a_local_job(run_wml, prog, venv):
    proc = run_wml("submit", "--env", str(venv), str(prog))
    assert proc.returncode == 0, proc.stderr
    assert f"prefix {venv} venv {venv}" in proc.stdout


def test_a_venv_is_activated_in_a_rendered_job(run_wml, isolated_env, tmp_path, prog, venv):
    proc = run_wml("render", "--env", str(venv), str(prog))
    assert proc.returncode == 0, proc.stderr
    script = tmp_path / "job.sh"
    script.write_text(proc.stdout)
    ran = subprocess.run(["bash", str(script)], cwd=tmp_path, env=isolated_env, capture_output=True, text=True,
                         timeout=120)
    assert ran.returncode == 0, ran.stderr
    assert f"prefix {venv} venv {venv}" in ran.stdout


def test_render_for_another_site_takes_the_env_path_as_it_is_there(run_wml, prog):
    proc = run_wml("render", "--site", "perlmutter", "-P", "m1234", "--env", "/gpfs/proj/envs/train", str(prog))
    assert proc.returncode == 0, proc.stderr
    assert "wml_env=/gpfs/proj/envs/train" in proc.stdout
    dry = run_wml("submit", "--dry-run", "--site", "perlmutter", "-P", "m1234", "--env", "/gpfs/proj/envs/train",
                  str(prog))
    assert dry.returncode == 0 and "wml_env=/gpfs/proj/envs/train" in dry.stdout, dry.stderr
    # this machine's jobs still check it here
    one_line_error(run_wml("submit", "--env", "/gpfs/proj/envs/train", str(prog)), "does not exist")
    one_line_error(run_wml("render", "--env", "/gpfs/proj/envs/train", str(prog)), "does not exist")


def test_the_unchecked_lines_tell_a_venv_from_a_conda_env_where_the_job_runs(tmp_path, venv):
    from wmlce_tools.env.activation import job_env_lines

    conda = tmp_path / "conda env"
    (conda / "conda-meta").mkdir(parents=True)
    neither = tmp_path / "neither"
    neither.mkdir()
    for path, expect in ((venv, f"V={venv} C="), (conda, f"V= C={conda}")):
        lines = job_env_lines(str(path), check=False)
        text = "set -eu\n" + "\n".join(lines) + '\necho "V=${VIRTUAL_ENV:-} C=${CONDA_PREFIX:-}"; command -v python || true\n'
        env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "CONDA_PREFIX")}
        ran = subprocess.run(["bash", "-c", text], capture_output=True, text=True, env=env, timeout=30)
        assert ran.returncode == 0 and expect in ran.stdout, ran.stdout + ran.stderr
        assert ran.stdout.splitlines()[-1].startswith(str(path / "bin")) or path == conda
    ran = subprocess.run(["bash", "-c", "\n".join(job_env_lines(str(neither), check=False))], capture_output=True,
                         text=True, timeout=30)
    assert ran.returncode == 2 and "is neither a virtualenv nor a conda environment" in ran.stderr


# -- item 6: a rendered chain script keeps its log -------------------------------------------------

@pytest.mark.parametrize("site, args, directive", [
    ("slurm-gpu", ["-P", "m1", "-t", "10"], r"#SBATCH --(?:output|error)=(\S+)"),
    ("theta", ["-P", "a", "-t", "60", "-N", "2"], r"#COBALT -[Oeo] (\S+)"),
    ("summit", ["-P", "a", "-t", "30"], r"#BSUB -[oe] (\S+)"),
])
def test_render_chain_writes_output_where_a_directory_exists(run_wml, tmp_path, prog, site, args, directive):
    proc = run_wml("render", "--site", site, "--chain", "2", *args, str(prog))
    assert proc.returncode == 0, proc.stderr
    paths = re.findall(directive, proc.stdout)
    assert paths, proc.stdout
    for p in paths:
        assert "segment-1" not in p and Path(p).parent.is_dir(), p


# -- item 7: the wrong host -----------------------------------------------------------------------

def test_submit_from_a_host_that_is_not_the_sites_says_so_in_one_line(run_wml, prog):
    proc = run_wml("submit", "--site", "perlmutter", "-P", "m1234", "-t", "10", str(prog), timeout=120)
    line = one_line_error(proc, "this host (testhost.example.org) is not a login node of perlmutter",
                          "`wml site detect` says local")
    assert "resolve_ctls_from_dns_srv" not in line


# -- item 8: the command line ---------------------------------------------------------------------

@pytest.mark.parametrize("args", [["-h"], ["jobs", "-h"], ["site", "list", "-h"], ["env", "lock", "-h"],
                                  ["status", "-h"]])
def test_dash_h_is_help_everywhere(run_wml, args):
    proc = run_wml(*args)
    assert proc.returncode == 0, proc.stderr
    assert "Usage:" in proc.stdout


@pytest.mark.parametrize("args, fragments", [
    (["rendr", "x.py"], ["no such command 'rendr'; did you mean 'render'?", "wml -h"]),
    (["site", "lst"], ["no such command 'lst'; did you mean 'list'?"]),
    (["render"], ["render: missing argument", "wml render -h"]),
    (["status"], ["status: missing argument"]),
    (["jobs", "--alll"], ["no such option --alll; did you mean --all?"]),
    (["render", "--nodez", "2", "PROG"], ["unknown option '--nodez'; did you mean --nodes?"]),
    (["submit", "--chian=2", "PROG"], ["unknown option '--chian=2'; did you mean --chain?"]),
    (["render", "--site", "summitt", "PROG"], ["unknown site 'summitt'; did you mean 'summit'?"]),
    (["render", "-N", "two", "PROG"], ["render: invalid value for '--nodes'"]),
])
def test_parser_errors_are_our_one_line(run_wml, prog, args, fragments):
    line = one_line_error(run_wml(*[str(prog) if a == "PROG" else a for a in args]), *fragments)
    assert line.startswith("wml: error: ") and "Usage:" not in line


def test_site_list_piped_keeps_whole_columns(run_wml):
    out = run_wml("site", "list").stdout
    assert "…" not in out
    assert str(Path(__file__).parents[2] / "site_configs" / "perlmutter.yaml") in out


def test_one_rank_is_one_rank(run_wml, prog):
    out = run_wml("render", str(prog)).stdout
    assert "# 1 rank on 1 node(s)" in out and "1 ranks" not in out
