"""What Slurm, PBS and LSF users expect from a submit command (issue 40): each scheduler's own
option spellings, walltime forms and pass-through directives, checked in the rendered script."""
from __future__ import annotations

from pathlib import Path

import pytest
from helpers.job_output import directives

from wmlce_tools.errors import WmlError
from wmlce_tools.jobscript import render_script
from wmlce_tools.options import JobOptions, plan_from

SITES = Path(__file__).parents[2] / "site_configs"


def script(tmp_path, program, **kw):
    plan, _ = plan_from(JobOptions.of(**kw), [str(program)], jobdir=tmp_path, preview=True, logs_dir=tmp_path)
    return render_script(plan)


@pytest.mark.parametrize("site, line", [
    ("perlmutter", "#SBATCH --account=m1234"), ("polaris", "#PBS -A m1234"),
    ("summit", "#BSUB -P m1234"), ("theta", "#COBALT -A m1234")])
@pytest.mark.parametrize("flag", ["-A", "--account", "-P", "--project"])
def test_account_is_one_option_on_every_site(run_wml, program, site, line, flag):
    proc = run_wml("render", "-s", site, flag, "m1234", str(program))
    assert proc.returncode == 0, proc.stderr
    assert line in proc.stdout.splitlines()


def test_account_from_python_and_refused_twice(tmp_path, program):
    assert "#SBATCH --account=m9" in script(tmp_path, program, site="perlmutter", account="m9")
    with pytest.raises(WmlError, match="one option"):
        JobOptions.of(account="a", project="b")


def test_site_profile_defaults_give_the_account(run_wml, program, tmp_path):
    extra = tmp_path / "sites"
    extra.mkdir()
    text = (SITES / "summit.yaml").read_text()
    (extra / "summit.yaml").write_text(text + "\ndefaults:\n  account: abc123\n")
    env = {"WML_SITE_PATH": str(extra)}
    proc = run_wml("render", "-s", "summit", str(program), env=env)     # summit requires a project
    assert proc.returncode == 0, proc.stderr
    assert "#BSUB -P abc123" in proc.stdout.splitlines()
    given = run_wml("render", "-s", "summit", "-A", "other", str(program), env=env).stdout
    assert "#BSUB -P other" in given.splitlines() and "abc123" not in given
    bad = run_wml("render", "-s", "summit", str(program)).stderr
    assert "-A/--account" in bad and "defaults" in bad
