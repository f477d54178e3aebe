"""The wml command line as a user meets it: real subprocesses, isolated HOME."""
from __future__ import annotations

import json
import os
import sys
import textwrap
from pathlib import Path

import pytest


@pytest.fixture
def prog(tmp_path):
    p = tmp_path / "train.py"
    p.write_text("import sys\nprint('args', sys.argv[1:])\n")
    return p


def one_line_error(proc, *fragments):
    assert proc.returncode != 0, proc.stdout
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    for f in fragments:
        assert f in lines[0], lines[0]
    return lines[0]


def test_version_and_help(run_wml):
    assert run_wml("--version").stdout.startswith("wml ")
    out = run_wml("--help").stdout
    for cmd in ("render", "submit", "site"):
        assert cmd in out
    assert "--install-completion" in out


def test_site_list_show_detect(run_wml):
    out = run_wml("site", "list").stdout
    for name in ("summit", "theta", "slurm-gpu", "local"):
        assert name in out
    show = run_wml("site", "show", "summit").stdout
    assert "scheduler: lsf" in show and "gpus_per_socket: 3" in show
    assert run_wml("site", "detect").stdout.startswith("local")
    assert run_wml("site", "detect", env={"WML_HOSTNAME": "login3.summit.olcf.ornl.gov"}).stdout.startswith("summit")
    assert run_wml("site", "detect", env={"WML_SITE": "theta"}).stdout.startswith("theta")


def test_user_profiles_add_and_override(run_wml, isolated_env, tmp_path):
    user = Path(isolated_env["XDG_CONFIG_HOME"]) / "wml" / "sites"
    user.mkdir(parents=True)
    text = (Path(__file__).parents[2] / "site_configs" / "slurm-gpu.yaml").read_text()
    (user / "mine.yaml").write_text(text.replace("name: slurm-gpu", "name: mycluster"))
    extra = tmp_path / "more"
    extra.mkdir()
    (extra / "summit.yaml").write_text(
        (Path(__file__).parents[2] / "site_configs" / "summit.yaml").read_text().replace("modules: [ibm-wml-ce]", "modules: [open-ce]"))
    out = run_wml("site", "list", env={"WML_SITE_PATH": str(extra)}).stdout
    assert "mycluster" in out
    assert "open-ce" in run_wml("site", "show", "summit", env={"WML_SITE_PATH": str(extra)}).stdout


def test_site_validate_names_file_line_and_key(run_wml, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(textwrap.dedent("""\
        name: broken
        scheduler: slurm
        launcher: srun
        platform: linux-64
        node:
          sockets: 2
          cores_per_socket: many
        total_nodes: 4
        queues: {q: {max_nodes: 4, max_walltime: "1:00"}}
        """))
    err = one_line_error(run_wml("site", "validate", str(bad)))
    assert f"{bad}:7: node.cores_per_socket:" in err
    bad.write_text("name: x\nscheduler: sge\n")
    assert f"{bad}:2: scheduler:" in one_line_error(run_wml("site", "validate", str(bad)))
    bad.write_text("name: [unclosed\n")
    assert "invalid YAML" in one_line_error(run_wml("site", "validate", str(bad)))
    good = Path(__file__).parents[2] / "site_configs" / "theta.yaml"
    assert run_wml("site", "validate", str(good)).returncode == 0


def test_render_summit_18_nodes(run_wml, prog):
    proc = run_wml("render", "--site", "summit", "--nodes", "18", "-P", "abc123", str(prog), "--lr", "0.1")
    assert proc.returncode == 0, proc.stderr
    assert "jsrun -n 108 -a 1 -c 7 -g 1 -r 6 -b packed:7" in proc.stdout
    # the env active at submit gives the python (issue 40.2), not summit's module
    assert proc.stdout.rstrip().endswith(f"-- {sys.executable} {prog} --lr 0.1")
    assert not (Path(os.environ["WML_JOBS_DIR"])).exists()


@pytest.mark.parametrize("args, fragments", [
    (["--site", "nowhere"], ["unknown site 'nowhere'", "known sites:", "summit"]),
    (["--site", "summit", "--nodes", "5000"], ["5000 nodes is above the 4608-node limit of queue 'batch'"]),
    (["--site", "summit", "-t", "25:00"], ["above the 2:00 maximum"]),
    (["--site", "summit", "-t", "1:75"], ["malformed walltime '1:75'"]),
    (["--site", "summit", "-t", "soon"], ["malformed walltime 'soon'"]),
    (["--site", "summit", "--ranks-per-node", "6", "--gpus-per-rank", "2"], ["12 GPUs, but a summit node has 6"]),
    (["--site", "summit", "--cores-per-rank", "8"], ["48 cores, but a summit node has 42"]),
    (["--site", "summit", "-J", "x; rm -rf ~"], ["job name 'x; rm -rf ~'"]),
    (["--site", "summit", "-J", "$(id)"], ["job name '$(id)'"]),
    (["--site", "summit", "-P", "a b"], ["--project 'a b'"]),
    (["--site", "summit", "-o", "out\nx"], ["--output"]),
    (["--site", "summit", "--export", "NOEQUALS"], ["expected KEY=VALUE"]),
    (["--site", "summit", "--export", "1BAD=x"], ["not a valid environment variable name"]),
    (["--site", "summit", "--module", "x;y"], ["module 'x;y'"]),
    (["--site", "theta", "--rack-contiguous", "-N", "128"], ["--rack-contiguous is an LSF expert-mode option"]),
    (["--site", "summit", "--nodes", "0"], ["--nodes must be an integer >= 1"]),
])
def test_bad_input_is_one_line_and_writes_nothing(run_wml, prog, args, fragments, isolated_env):
    for cmd in (["render"], ["submit"], ["submit", "--dry-run"]):
        one_line_error(run_wml(*cmd, *args, str(prog)), *fragments)
    assert not Path(isolated_env["WML_JOBS_DIR"]).exists()


def test_program_not_found(run_wml):
    one_line_error(run_wml("render", "no/such/train.py"), "program not found: no/such/train.py")
    one_line_error(run_wml("render", "no-such-command-xyz"), "program not found")


def test_dry_run_prints_script_and_submit_command_and_writes_nothing(run_wml, prog, isolated_env):
    proc = run_wml("submit", "--dry-run", "--site", "summit", "-N", "2", "-P", "abc", str(prog))
    assert proc.returncode == 0, proc.stderr
    assert "#BSUB -nnodes 2" in proc.stdout
    assert "would write" in proc.stdout and "bsub < " in proc.stdout
    proc = run_wml("submit", "--dry-run", "--json", "--site", "theta", "-N", "128", str(prog))
    info = json.loads(proc.stdout)
    assert info["scheduler"] == "cobalt" and info["submit_command"].startswith("qsub ") and info["job_id"] is None
    assert info["script"].endswith("job.sh") and "#COBALT -n 128" in info["script_text"]
    assert not Path(isolated_env["WML_JOBS_DIR"]).exists()


def test_interactive_dry_run(run_wml, prog):
    out = run_wml("submit", "--interactive", "--dry-run", "--site", "summit", "-P", "abc", str(prog)).stdout
    assert out.startswith("bsub -Is -nnodes 1 -W 1:00 -q batch") and "-P abc" in out
    out = run_wml("submit", "--interactive", "--dry-run", "--site", "slurm-gpu", str(prog)).stdout
    assert out.startswith("salloc --nodes=1 --ntasks-per-node=4")
    one_line_error(run_wml("submit", "--interactive", str(prog)), "no scheduler")


def test_missing_scheduler_command(run_wml, prog, isolated_env):
    env = {"PATH": "/usr/bin:/bin"}
    err = one_line_error(run_wml("submit", "--site", "summit", "-P", "abc", str(prog), env=env))
    assert err == "wml: error: bsub not found: run this on a Summit login node, or use --dry-run"
    # nothing left behind (issue 40.8): the job directory is written only once bsub is here
    assert not Path(isolated_env["WML_JOBS_DIR"]).exists()


def _fake_tool(tmp_path, name, body):
    """A TEST DOUBLE for a scheduler command that LSF/Cobalt users have and we do not."""
    d = tmp_path / "fakebin"
    d.mkdir(exist_ok=True)
    f = d / name
    f.write_text("#!/bin/bash\n" + body)
    f.chmod(0o755)
    return {"PATH": f"{d}:/usr/bin:/bin"}


def test_scheduler_rejection_shows_its_message_and_keeps_the_script(run_wml, prog, tmp_path, isolated_env):
    env = _fake_tool(tmp_path, "bsub", 'cat > /dev/null; echo "Project abc is not valid. Job not submitted." >&2; exit 255\n')
    err = one_line_error(run_wml("submit", "--site", "summit", "-P", "abc", str(prog), env=env))
    assert "bsub rejected the job: Project abc is not valid. Job not submitted." in err
    scripts = list(Path(isolated_env["WML_JOBS_DIR"]).glob("*/job.sh"))
    assert len(scripts) == 1 and "#BSUB -P abc" in scripts[0].read_text()


def test_submit_parses_the_reply_and_reports_json(run_wml, prog, tmp_path):
    env = _fake_tool(tmp_path, "bsub", 'grep -q "^#BSUB -nnodes 3$" || exit 3\necho "Job <701106> is submitted to default queue <batch>."\n')
    proc = run_wml("submit", "--json", "--site", "summit", "-N", "3", "-P", "abc", str(prog), env=env)
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    assert info["job_id"] == "701106" and info["site"] == "summit" and info["scheduler"] == "lsf"
    assert info["submit_command"].startswith("bsub < ") and Path(info["script"]).is_file()
    assert info["output"].endswith(".701106.out")
    env = _fake_tool(tmp_path, "qsub", 'test -x "$1" || exit 4\necho 123456\n')
    info = json.loads(run_wml("submit", "--json", "--site", "theta", "-N", "128", str(prog), env=env).stdout)
    assert info["job_id"] == "123456"


def test_submit_env_activates_a_created_env_in_the_job(run_wml, tmp_path):
    """--env puts the env's bin first on PATH: the job's `python` is the env's."""
    import sys
    prefix = tmp_path / "envs" / "myenv"
    (prefix / "conda-meta").mkdir(parents=True)
    (prefix / "conda-meta" / "history").write_text("")
    (prefix / "bin").mkdir()
    (prefix / "bin" / "python").symlink_to(sys.executable)
    (prefix / "etc" / "conda" / "activate.d").mkdir(parents=True)
    (prefix / "etc" / "conda" / "activate.d" / "x.sh").write_text("export FROM_ACTIVATE_D=yes\n")
    prog = tmp_path / "show.py"
    prog.write_text("import os, sys\nprint('PREFIX', os.environ['CONDA_PREFIX'], os.environ['FROM_ACTIVATE_D'], sys.argv[1:])\n")
    rendered = run_wml("render", "--env", str(prefix), str(prog)).stdout
    assert f"export CONDA_PREFIX={prefix}" in rendered and f"-- python {prog}" in rendered
    proc = run_wml("submit", "--env", str(prefix), str(prog), "a b", timeout=180)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert f"PREFIX {prefix} yes ['a b']" in proc.stdout
    one_line_error(run_wml("render", "--env", "no-such-env-xyz", str(prog)), "no-such-env-xyz")


def test_local_submit_runs_now_streams_output_and_returns_the_exit_status(run_wml, tmp_path, isolated_env):
    prog = tmp_path / "job.py"
    prog.write_text(textwrap.dedent("""\
        import os, sys
        rank = int(os.environ.get("RANK", "-1"))
        print("hello from rank", rank, "of", os.environ.get("WORLD_SIZE"), "local", os.environ.get("LOCAL_RANK"), flush=True)
        sys.exit(int(sys.argv[1]) if rank == 1 else 0)
        """))
    proc = run_wml("submit", "--nodes", "2", "--json", str(prog), "0", timeout=180)
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    log = Path(info["output"]).read_text()
    for r in (0, 1):
        assert f"hello from rank {r} of 2 local 0" in log
        assert f"hello from rank {r} of 2 local 0" in proc.stderr  # streamed while running
    assert info["exit_code"] == 0 and info["job_id"].startswith("local-")
    proc = run_wml("submit", "--nodes", "2", str(prog), "3", timeout=180)
    assert proc.returncode == 3
    assert "finished with exit status 3" in proc.stderr


def test_bench_allreduce_runs_through_ddlrun(run_wml):
    proc = run_wml("bench", "allreduce", "-n", "2", "--no-sweep", "--no-gloo", "--repeats", "1", "--iters", "1",
                   timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "ResNet-50 gradients: 161 tensors" in proc.stdout
    assert "| ddl allreduce_n |" in proc.stdout and "| mpi4py Allreduce per tensor |" in proc.stdout


def test_a_mistyped_option_is_not_taken_as_the_program(run_wml, prog):
    one_line_error(run_wml("render", "-Z", "x", str(prog)), "unknown option '-Z'")


@pytest.mark.parametrize("group", ["env", "module", "site", "bench", "sweep"])
def test_a_groups_help_gives_each_command_one_line(run_wml, group):
    """``wml env --help`` broke a command's line where its docstring's line ended, mid-sentence
    (issue 47): on a terminal wide enough, each command is one line of the list."""
    import typer

    from wmlce_tools.cli import app

    names = set(typer.main.get_command(app).get_command(None, group).commands)
    out = run_wml(group, "--help", env={"COLUMNS": "400"}).stdout
    listed = out.split("Commands", 1)[1].splitlines()[1:]
    rows = [ln.strip(" │╰─╯") for ln in listed if ln.strip(" │╰─╯")]
    assert rows and all(row.split()[0] in names and "  " in row for row in rows), out
    assert sorted(row.split()[0] for row in rows) == sorted(names), out
