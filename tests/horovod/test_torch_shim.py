"""The `horovod` alias: on under ddlrun --horovod / WML_HOROVOD=1 / wml submit --horovod, and
otherwise absent, so a real Horovod installation is never shadowed."""
import os
import subprocess
import sys

from torch_glue_helpers import REPO, clean_env, ddlrun

from ddl_runtime.horovod.shim import SHIM_DIR

PROBE = ("import horovod, horovod.torch as hvd, ddl_runtime.horovod.torch as real; "
         "print('REAL' if getattr(horovod, 'REAL_HOROVOD_DOUBLE', False) else 'WML', hvd is real)")


def _fake_horovod(tmp_path):
    """A test double standing in for an installed Horovod: a package that says it is the real one."""
    pkg = tmp_path / "site" / "horovod"
    (pkg / "torch").mkdir(parents=True)
    (pkg / "__init__.py").write_text("REAL_HOROVOD_DOUBLE = True\n")
    (pkg / "torch" / "__init__.py").write_text("")
    return tmp_path / "site"


def test_without_the_flag_an_installed_horovod_is_used(tmp_path):
    site = _fake_horovod(tmp_path)
    job = ddlrun(["-n", "1", "-x", f"PYTHONPATH={site}{os.pathsep}{REPO}", "python", "-c", PROBE])
    assert job.returncode == 0, job.output
    assert job.stdout.strip().splitlines()[-1] == "REAL False"


def test_with_the_flag_horovod_is_ddl_runtime_even_over_an_installed_one(tmp_path):
    site = _fake_horovod(tmp_path)
    job = ddlrun(["--horovod", "-n", "1", "-x", f"PYTHONPATH={site}{os.pathsep}{REPO}", "python", "-c", PROBE])
    assert job.returncode == 0, job.output
    assert job.stdout.strip().splitlines()[-1] == "WML True"


def test_without_the_flag_and_without_horovod_import_fails():
    job = ddlrun(["-n", "1", "python", "-c", "import horovod"])
    assert job.returncode != 0 and "No module named 'horovod'" in job.stderr, job.output


def test_env_switch_and_the_launch_command():
    dry = ddlrun(["--dry-run", "-n", "2", "-x", "PYTHONPATH=/opt/mine", "python", "train.py"],
                 env={"WML_HOROVOD": "1"})
    assert dry.returncode == 0, dry.output
    assert f"PYTHONPATH {SHIM_DIR}{os.pathsep}/opt/mine " in dry.stdout  # the shim first, the user's path kept
    off = ddlrun(["--dry-run", "-n", "2", "python", "train.py"], env={"WML_HOROVOD": "0"})
    assert SHIM_DIR not in off.stdout


def test_bad_env_switch_is_one_line():
    job = ddlrun(["--dry-run", "-n", "2", "python", "train.py"], env={"WML_HOROVOD": "maybe"})
    assert job.returncode == 2
    assert job.stderr.strip() == "ddlrun: error: WML_HOROVOD='maybe' must be 1 or 0"


def test_missing_horovod_module_names_what_is_provided():
    job = ddlrun(["--horovod", "-n", "1", "python", "-c", "import horovod.spark"])
    assert job.returncode != 0
    assert "No module named 'horovod.spark': wml's Horovod layer provides horovod.torch" in job.stderr


def test_wml_render_horovod_exports_the_switch():
    def render(*extra):
        return subprocess.run([sys.executable, "-m", "wmlce_tools", "render", "--nodes", "2", *extra,
                               str(REPO / "examples" / "train_digits.py")], capture_output=True, text=True,
                              env=clean_env(), cwd=str(REPO), timeout=60)
    on, off = render("--horovod"), render()
    assert on.returncode == 0 and off.returncode == 0, on.stderr + off.stderr
    assert "\nexport WML_HOROVOD=1\n" in on.stdout
    assert "WML_HOROVOD" not in off.stdout


def test_alias_modules_are_the_runtime_modules_at_any_depth():
    code = ("import horovod, horovod.torch as hvd, horovod.torch.mpi_ops as ops, horovod.torch.optimizer as opt\n"
            "import ddl_runtime.horovod as h, ddl_runtime.horovod.torch as t, ddl_runtime.horovod.torch.optimizer as o\n"
            "import sys\n"
            "assert horovod is h and hvd is t and opt is o and ops is sys.modules['ddl_runtime.horovod.torch.mpi_ops']\n"
            "assert t.__spec__.name == 'ddl_runtime.horovod.torch' and o.__spec__.name.startswith('ddl_runtime.')\n"
            "print('same modules')")
    env = clean_env({"PYTHONPATH": f"{SHIM_DIR}{os.pathsep}{REPO}"})
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "same modules", proc.stderr
