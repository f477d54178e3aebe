"""What Slurm, PBS and LSF users expect from a submit command (issue 40): each scheduler's own
option spellings, walltime forms and pass-through directives, checked in the rendered script."""
from __future__ import annotations

import json
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


@pytest.mark.parametrize("text, seconds", [
    ("90", 5400), ("90m", 5400), ("90min", 5400), ("2h", 7200), ("1h30m", 5400), ("1H30M", 5400),
    ("1d12h", 129600), ("90s", 90), ("1h0m30s", 3630), ("1:30", 5400), ("01:30:00", 5400),
    ("1-00:00:00", 86400), ("2-12", 216000), ("1-0:30", 88200)])
def test_walltime_forms(text, seconds):
    from wmlce_tools.walltime import parse_duration_s

    assert parse_duration_s(text) == seconds


@pytest.mark.parametrize("text", ["h", "1h30", "30m1h", "1.5h", "0m", "1x", "-5m", ""])
def test_walltime_nonsense_is_one_error_naming_the_forms(text):
    from wmlce_tools.walltime import parse_duration_s

    with pytest.raises(WmlError, match="walltime"):
        parse_duration_s(text)


@pytest.mark.parametrize("site, t, line", [
    ("perlmutter", "2h", "#SBATCH --time=02:00:00"),
    ("perlmutter", "1-12", "#SBATCH --time=1-12:00:00"),        # sbatch's days-hours:minutes:seconds
    ("perlmutter", "36h", "#SBATCH --time=1-12:00:00"),
    ("polaris", "1d", "#PBS -l walltime=24:00:00"),
    ("summit", "90m", "#BSUB -W 1:30"),
    ("theta", "1h30m", "#COBALT -t 90")])
def test_walltime_normalised_per_scheduler(run_wml, program, site, t, line):
    args = ["-N", "128"] if site == "theta" else []
    proc = run_wml("render", "-s", site, "-A", "p1", "-t", t, *args, str(program))
    assert proc.returncode == 0, proc.stderr
    assert line in proc.stdout.splitlines()


def test_two_numbers_read_unlike_sbatch_are_refused_naming_both(run_wml, program):
    """Issue 53: -t 30:00 on a Slurm site was 30 hours with a warning; sbatch users mean 30 min."""
    proc = run_wml("render", "-s", "perlmutter", "-t", "30:00", str(program))
    assert proc.returncode != 0 and proc.stdout == "" and "Traceback" not in proc.stderr
    assert "-t 30:00 is ambiguous on perlmutter" in proc.stderr and "30 h 0 min" in proc.stderr
    assert "sbatch --time as MM:SS (30 min 0 s)" in proc.stderr and "-t 30h or -t 30m" in proc.stderr
    pbs = run_wml("render", "-s", "polaris", "-A", "a", "-t", "0:30", str(program))
    assert pbs.returncode != 0 and "qsub -l walltime as MM:SS (0 min 30 s); say -t 30m or -t 30s" in pbs.stderr
    ok = run_wml("render", "-s", "summit", "-P", "a", "-t", "1:30", str(program))     # LSF -W reads HH:MM
    assert ok.returncode == 0 and "warning" not in ok.stderr and "#BSUB -W 1:30" in ok.stdout


PASS = ["--reservation", "res1", "--mail", "me@example.org", "--begin", "2026-12-01T08:00", "-C", "hbm80g"]
WHOLE_NODES = ["--mem", "64G", "--exclusive"]     # not on LSF: its jobs get whole nodes (passthrough.py)


@pytest.mark.parametrize("site, args, lines", [
    ("perlmutter", WHOLE_NODES + PASS,
     ["#SBATCH --constraint=gpu&hbm80g", "#SBATCH --mem=64G", "#SBATCH --exclusive",
      "#SBATCH --reservation=res1", "#SBATCH --mail-user=me@example.org",
      "#SBATCH --mail-type=END,FAIL", "#SBATCH --begin=2026-12-01T08:00:00"]),
    ("summit", PASS, ["#BSUB -U res1", "#BSUB -u me@example.org",
                      "#BSUB -N", "#BSUB -b 2026:12:01:08:00", '#BSUB -R "select[hbm80g]"'])])
def test_pass_through_in_each_schedulers_spelling(run_wml, program, site, args, lines):
    proc = run_wml("render", "-s", site, "-A", "p1", *args, str(program))
    assert proc.returncode == 0, proc.stderr
    have = proc.stdout.splitlines()
    assert [ln for ln in have if ln in lines] == lines
    assert have.index(lines[-1]) < have.index("set -euo pipefail")      # in the header
    assert not any("rusage" in ln or ln.strip() == "#BSUB -x" for ln in have)


def test_pass_through_on_pbs_and_cobalt(run_wml, program):
    out = run_wml("render", "-s", "polaris", "-A", "p1", "--mem", "64G", "--exclusive", "--reservation", "R123",
                  "--mail", "me", "--begin", "08:30", str(program)).stdout.splitlines()
    for line in ("#PBS -q R123", "#PBS -l select=1:system=polaris:mem=64gb", "#PBS -l place=scatter:excl",
                 "#PBS -M me", "#PBS -m ae", "#PBS -a 0830"):
        assert line in out
    out = run_wml("render", "-s", "theta", "-N", "128", "--mail", "me", "-C", "location=1-10", str(program)).stdout
    assert "#COBALT --notify me" in out and "#COBALT --attrs mcdram=cache:numa=quad:location=1-10" in out


@pytest.mark.parametrize("site, args, fragment", [
    ("theta", ["-N", "128", "--mem", "1G"], "--mem: theta (Cobalt) has no such option"),
    ("theta", ["-N", "128", "--begin", "08:00"], "--begin: theta (Cobalt) has no such option"),
    ("theta", ["-N", "128", "--exclusive"], "--exclusive: theta (Cobalt) has no such option"),
    ("polaris", ["-A", "a", "-C", "x"], "--constraint: polaris (PBS Pro) has no such option"),
    ("polaris", ["-A", "a", "-q", "debug", "--reservation", "R1"], "a reservation is its own queue"),
    ("local", ["--mem", "1G"], "--mem: local runs jobs now on this machine"),
    ("perlmutter", ["--mem", "64X"], "--mem '64X'"),
    ("perlmutter", ["--begin", "tomorrow"], "--begin 'tomorrow'"),
    ("perlmutter", ["--reservation", "a b"], "--reservation 'a b'"),
    ("perlmutter", ["--directive", "#PBS -l mem=1gb"], "a #PBS line; perlmutter (Slurm) reads '#SBATCH ...' lines"),
    ("perlmutter", ["--directive", "--licenses=x"], "not a scheduler directive"),
    ("perlmutter", ["--directive", "#SBATCH --nodes=4"], "wml writes --nodes itself; give -N"),
    ("perlmutter", ["--directive", "#SBATCH -A other"], "wml writes -A itself; give -A"),
    ("polaris", ["-A", "a", "--directive", "#PBS -l walltime=1:00:00"], "wml writes -l walltime itself; give -t"),
    ("summit", ["-A", "a", "--directive", "#BSUB -nnodes 3"], "give -N"),
    # Summit: -nnodes (LSF's CSM easy mode) gives whole nodes; easy mode has no compute-node memory request
    ("summit", ["-A", "a", "--mem", "64G"], "--mem: summit (LSF) has no such option; an LSF job here gets its "
                                            "compute nodes whole (#BSUB -nnodes, LSF's CSM easy mode), each with "
                                            "512 GB; bsub asks for a compute node's memory only in CSM expert mode"),
    ("summit", ["-A", "a", "--exclusive"], "--exclusive: summit (LSF) has no such option; an LSF job here gets its "
                                           "compute nodes whole (#BSUB -nnodes, LSF's CSM easy mode), so no other "
                                           "job shares them: there is nothing to ask for"),
    ("summit", ["-A", "a", "--directive", "#BSUB -x"], "'#BSUB -x': an LSF job here gets its compute nodes whole"),
    ("perlmutter", ["--directive", "#SBATCH --x\n#SBATCH --y"], "one line"),
    ("local", ["--directive", "#SBATCH --x"], "local runs jobs now"),
])
def test_pass_through_refusals_are_one_line_naming_the_site(run_wml, program, site, args, fragment):
    from test_cli import one_line_error

    one_line_error(run_wml("render", "-s", site, *args, str(program)), fragment)


def test_directives_are_copied_in_order_and_reach_an_interactive_allocation(run_wml, program):
    out = run_wml("render", "-s", "perlmutter", "--directive", "#SBATCH --licenses=scratch",
                  "--directive", "  #SBATCH   --comment=x", str(program)).stdout.splitlines()
    assert out.index("#SBATCH --licenses=scratch") + 1 == out.index("#SBATCH --comment=x")
    line = run_wml("submit", "--interactive", "--dry-run", "-s", "perlmutter", "--mem", "3G",
                   "--directive", "#SBATCH --licenses=scratch").stdout
    assert line.startswith("salloc ") and "--mem=3G --licenses=scratch" in line


def _fake_sbatch(tmp_path):
    """A TEST DOUBLE for sbatch (not installed here): checks it got the copied script."""
    from test_cli import _fake_tool

    return _fake_tool(tmp_path, "sbatch", 'test "$1" = --parsable && grep -q "^#SBATCH --mem=8G" "$2" || exit 3\n'
                                          'echo 4242\n')


def test_submit_script_submits_a_hand_written_script_and_tracks_it(run_wml, tmp_path, isolated_env):
    job = tmp_path / "mine.sh"
    job.write_text("#!/bin/bash\n#SBATCH --mem=8G\n#SBATCH -o run.%j.log\nsrun hostname\n")
    env = _fake_sbatch(tmp_path)
    proc = run_wml("submit", "-s", "slurm-gpu", "--script", str(job), "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    assert info["job_id"] == "4242" and info["output"] == str(tmp_path / "run.4242.log")
    assert Path(info["script"]).read_text() == job.read_text()
    listed = run_wml("jobs", "--json", env=env).stdout
    assert "4242" in listed and str(info["script"]) in listed
    dry = run_wml("submit", "-s", "slurm-gpu", "--script", str(job), "--dry-run", env=env)
    assert dry.returncode == 0 and "would copy" in dry.stdout and "sbatch --parsable" in dry.stdout


def test_submit_script_on_the_local_site_runs_it_and_logs_it(run_wml, tmp_path):
    job = tmp_path / "mine.sh"
    job.write_text("#!/bin/bash\necho hello from $WML_JOB_ID\nexit 3\n")
    proc = run_wml("submit", "--script", str(job))
    assert proc.returncode == 3 and "hello from local-mine-" in proc.stdout
    logs = run_wml("logs", "@1").stdout
    assert "hello from local-mine-" in logs


@pytest.mark.parametrize("args, fragment", [
    (["-s", "slurm-gpu", "-N", "2"], "--nodes goes into it as a directive"),
    (["-s", "slurm-gpu", "--mem", "1G"], "--mem goes into it as a directive"),
    (["-s", "polaris"], "has #SBATCH lines; polaris (PBS Pro) reads #PBS lines"),
    (["-s", "slurm-gpu", "--interactive"], "--interactive"),
])
def test_submit_script_refusals(run_wml, tmp_path, args, fragment):
    from test_cli import one_line_error

    job = tmp_path / "mine.sh"
    job.write_text("#!/bin/bash\n#SBATCH --mem=8G\nsrun hostname\n")
    one_line_error(run_wml("submit", *args, "--script", str(job)), fragment)
    one_line_error(run_wml("submit", "-s", "slurm-gpu", "--script", str(job), "prog.py"), "give no program")
    one_line_error(run_wml("submit", "-s", "slurm-gpu", "--script", str(tmp_path / "none.sh")), "no such file")


@pytest.fixture
def no_active_env(monkeypatch):
    """wml run from no venv or conda env, none activated (the system python)."""
    import sys

    monkeypatch.delenv("VIRTUAL_ENV", raising=False)
    monkeypatch.delenv("CONDA_PREFIX", raising=False)
    monkeypatch.setattr(sys, "prefix", sys.base_prefix)


def _program_argv(tmp_path, program, **kw):
    plan, _ = plan_from(JobOptions.of(**kw), [str(program)], jobdir=tmp_path, preview=True)
    return plan.program, plan.python


def test_interpreter_rule_env_first(tmp_path, program):
    prefix = tmp_path / "venv"
    (prefix / "bin").mkdir(parents=True)
    (prefix / "pyvenv.cfg").write_text("home = /usr/bin\n")
    argv, (python, why) = _program_argv(tmp_path, program, site="frontier", account="a", env=str(prefix))
    assert argv[0] == "python" and "--env" in why


def test_interpreter_rule_the_active_env_on_every_site(tmp_path, program, monkeypatch):
    prefix = tmp_path / "other-venv"
    (prefix / "bin").mkdir(parents=True)
    (prefix / "bin" / "python").write_text("")
    monkeypatch.setenv("VIRTUAL_ENV", str(prefix))
    for site in ("summit", "frontier", "polaris", "perlmutter", "aurora"):
        argv, (python, why) = _program_argv(tmp_path, program, site=site, account="a")
        assert argv[0] == str(prefix / "bin" / "python") and str(prefix) in why, site


def test_interpreter_rule_then_the_sites_python_module(tmp_path, program, no_active_env):
    import sys

    argv, (python, why) = _program_argv(tmp_path, program, site="summit", account="a")
    assert argv[0] == "python" and "module ibm-wml-ce" in why
    argv, _ = _program_argv(tmp_path, program, site="local")
    assert argv[0] == sys.executable
    for site in ("frontier", "perlmutter"):     # modules that provide no python, or none
        with pytest.raises(WmlError, match="bare python found nowhere"):
            _program_argv(tmp_path, program, site=site, account="a")
    with pytest.raises(WmlError, match="bare python found nowhere"):
        plan_from(JobOptions.of(site="frontier", account="a"), ["python", str(program)], jobdir=tmp_path, preview=True)


def test_the_dry_run_says_which_python(run_wml, program):
    out = run_wml("submit", "--dry-run", "-s", "summit", "-A", "a", str(program)).stdout
    assert "# python: " in out and "the env active at submit" in out


def test_a_chain_submit_without_the_scheduler_leaves_nothing(run_wml, program, isolated_env):
    from test_cli import one_line_error

    one_line_error(run_wml("submit", "-s", "summit", "-A", "a", "--chain", "2", str(program),
                           env={"PATH": "/usr/bin:/bin"}), "bsub not found")
    assert not Path(isolated_env["WML_JOBS_DIR"]).exists()


def test_a_malformed_site_file_is_one_warning_unless_its_site_is_used(run_wml, program, tmp_path):
    extra = tmp_path / "sites"
    extra.mkdir()
    (extra / "broken.yaml").write_text("name: broken\nscheduler: nope\n")
    env = {"WML_SITE_PATH": str(extra)}
    for args in (["site", "list"], ["render", "-s", "summit", "-A", "a", str(program)]):
        proc = run_wml(*args, env=env)
        assert proc.returncode == 0, proc.stderr
        assert proc.stderr.splitlines() == [f"wml: warning: site file skipped: {extra / 'broken.yaml'}:2: scheduler: "
                                            "Invalid enum value 'nope' (known: cobalt, local, lsf, pbs, slurm; a "
                                            "package installed beside wml adds one through the entry point group "
                                            "wml.schedulers)"], proc.stderr
    from test_cli import one_line_error

    one_line_error(run_wml("render", "-s", "broken", str(program), env=env), "broken.yaml:2: scheduler")
    # a broken override of a bundled site is an error when that site is used, not the bundled one
    (extra / "broken.yaml").unlink()
    (extra / "summit.yaml").write_text("name: summit\nnode: [\n")
    one_line_error(run_wml("render", "-s", "summit", "-A", "a", str(program), env=env), "summit.yaml", "invalid YAML")


def test_local_oversubscription_is_one_warning(run_wml, program):
    from wmlce_tools.site.detect import count_cores

    cores = count_cores()
    over = run_wml("render", "-N", "2", "--ranks-per-node", str(cores), str(program))
    assert over.returncode == 0
    assert over.stderr.splitlines() == [f"wml: warning: {2 * cores} rank(s) x 1 core(s) on this machine's {cores} "
                                        "core(s): the ranks share cores and run slower (a cluster site refuses such "
                                        "a layout); fewer ranks fit"]
    assert run_wml("render", "--ranks-per-node", str(cores), str(program)).stderr == ""


def test_perlmutter_interactive_qos(run_wml, program):
    from test_cli import one_line_error

    line = run_wml("submit", "--interactive", "--dry-run", "-s", "perlmutter", "-A", "m1").stdout
    assert line.startswith("salloc ") and "--qos=interactive" in line
    line = run_wml("submit", "--interactive", "--dry-run", "-s", "perlmutter", "-A", "m1", "-q", "interactive").stdout
    assert "--qos=interactive" in line
    one_line_error(run_wml("render", "-s", "perlmutter", "-q", "interactive", str(program)),
                   "'interactive' on perlmutter is for interactive allocations only")
    # a batch job that the default QOS refuses never falls back to the interactive one
    assert "--qos=regular" in run_wml("render", "-s", "perlmutter", "-N", "2", str(program)).stdout


@pytest.mark.parametrize("mode", [[], ["--pack", "2"]])
def test_a_sweep_passes_the_pass_through_options_too(run_wml, tmp_path, mode):
    prog = tmp_path / "sw.py"
    prog.write_text("print(1)\n")
    out = run_wml("sweep", "run", "--dry-run", "-s", "perlmutter", "--mem", "64G", "--directive",
                  "#SBATCH --licenses=x", *mode, "--param", "lr=1,2", str(prog), "--lr", "{lr}")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert "#SBATCH --mem=64G" in lines and "#SBATCH --licenses=x" in lines
