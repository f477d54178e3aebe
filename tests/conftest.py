"""Fixtures shared by every test package.

Each test runs with its own HOME, XDG dirs and job directory, so no user configuration or
earlier job leaks in, and nothing is written outside tmp_path.
"""
from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
OUR_CODE = tuple(str(REPO / name) for name in ("wmlce_tools" + os.sep, "ddl_runtime" + os.sep, "ddl.py"))


def _from_our_code(frame) -> bool:
    """Whether a frame of this stack runs wml's own code (wmlce_tools, ddl_runtime, ddl.py),
    other than by importing a library: what a module says while it is being imported (conda-lock's
    vendored conda, TensorFlow) is the library's own business, not a call of ours."""
    while frame is not None:
        code = frame.f_code
        if code.co_filename.startswith("<frozen importlib") and code.co_name == "_call_with_frames_removed":
            return False
        if code.co_filename.startswith(OUR_CODE):
            return True
        frame = frame.f_back
    return False


@pytest.fixture(autouse=True)
def warnings_from_our_code_fail(monkeypatch):
    """A warning raised while wml's own code runs fails the test: raised at the call, as an
    ``error`` filter would.  pyproject.toml's filters (``error::Warning:wmlce_tools.*``) catch the
    warnings attributed to our modules, imports included; this catches the rest: a library's
    deprecation of what our code calls, which the library attributes to its own module (rattler's
    ``Platform``, torch's ``all_gather_into_tensor``), but not what a library says as it is
    imported.  Warnings with no wml code on the stack are recorded as pytest records them (``warnings._showwarnmsg_impl``, which pytest's
    ``catch_warnings(record=True)`` sets); code that catches warnings itself
    (``catch_warnings``, ``pytest.warns``) sees them as before."""
    def show(message, category, filename, lineno, file=None, line=None):
        if _from_our_code(sys._getframe(1)):
            raise message if isinstance(message, Warning) else category(message)
        warnings._showwarnmsg_impl(warnings.WarningMessage(message, category, filename, lineno, file, line))

    monkeypatch.setattr(warnings, "showwarning", show)


@pytest.fixture
def isolated_env(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    # LINES and COLUMNS: pytest-xdist's workers carry a terminal size (24 x 80) that no job has
    # (show_env.py prints LINES long lines, which mixed Open MPI's output in other tests)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("WML_", "LSB_", "SLURM_", "COBALT_", "DDL_")) and k not in ("LINES", "COLUMNS")}
    env.update(HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"), XDG_DATA_HOME=str(home / ".local/share"),
               WML_JOBS_DIR=str(tmp_path / "wml-jobs"), WML_HOSTNAME="testhost.example.org")
    for k in list(os.environ):
        if k.startswith(("WML_", "LSB_", "SLURM_", "COBALT_", "DDL_")) or k in ("LINES", "COLUMNS"):
            monkeypatch.delenv(k, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    return env


@pytest.fixture
def run_wml(isolated_env, tmp_path):
    """Run the real ``wml`` command (this interpreter's) in tmp_path; returns CompletedProcess."""
    def run(*args, env=None, cwd=None, timeout=120, input=None):
        e = dict(isolated_env)
        if env:
            e.update(env)
        return subprocess.run([sys.executable, "-m", "wmlce_tools", *args], cwd=cwd or tmp_path, env=e,
                              capture_output=True, text=True, timeout=timeout, input=input)
    return run


def _one_at_a_time(nodeid: str) -> bool:
    """The tests that touch a local Slurm cluster (tests/slurm, ddlrun's and the Horovod examples'
    runs under Slurm, the scheduler-command tests), and those that run Debian's Open MPI (its PMIx,
    like the local Slurm's): by node id, so pytest-xdist's controller, which sees only node ids,
    can tell them too.  (Two Open MPI tests lost their output's line prefixes in a run where they
    ran beside the Slurm tests; one after another they never have.)"""
    lower = nodeid.lower()
    return "slurm" in lower or "openmpi" in lower or "open_mpi" in lower


# The quick tier's longest files (25 s or more of one worker's time, measured with --durations=0 on
# the 2-core VM, 2026-11-29), longest first: xdist sends them out first, so that the run does not
# end on one worker with a long file while the other is idle (a 9-minute tail was seen).  Only the
# order depends on it: a file renamed or missing here runs after these, in collection order.
LONGEST_FIRST = (
    "tests/heal/test_heal_local.py", "tests/report/test_report_runs.py", "tests/horovod/test_tf_horovod.py",
    "tests/report/test_report_local.py", "tests/horovod/test_hvd_edges.py", "tests/frameworks/test_framework_examples.py",
    "tests/horovod/test_examples_horovod.py", "tests/lms/test_wmlce.py", "tests/frameworks/test_walltime_resume.py",
    "tests/runtime/test_shm.py", "tests/horovod/test_torch_device_route_suite.py", "tests/checkpoint/test_torch_chain.py",
    "tests/sweep/test_sweep_local.py", "tests/frameworks/test_tensorflow_runtime.py", "tests/jobs/test_local_site.py",
    "tests/frameworks/test_tensorflow_keras.py", "tests/runtime/test_gpu_transport.py",
    "tests/foundation/test_bad_input_sweep.py", "tests/chain/test_torch_chain_e2e.py", "tests/env/test_env_pypi.py",
    "tests/lms/test_session.py", "tests/foundation/test_cli.py", "tests/foundation/test_submit_expectations.py",
    "tests/lms/test_bench_smoke.py", "tests/emulation/test_lsf_cobalt_scripts.py", "tests/horovod/test_torch_adasum.py",
    "tests/env/test_env_clone.py", "tests/emulation/test_chain_lsf_cobalt.py", "tests/stage/test_stage_job.py",
    "tests/launch/test_composition_local.py", "tests/env/test_env_create.py", "tests/horovod/test_torch_glue.py",
)


def _full_tier(config) -> bool:
    return os.environ.get("WML_TESTS", "").strip().lower() == "full"


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """The quick tier (tests/tiers.py) leaves out the full tier's tests unless WML_TESTS=full
    (``scripts/test --full``); a whole-suite collection first checks the table against what was
    collected.  Under pytest-xdist (``-n 2``, scripts/test) the tests that touch a local Slurm
    cluster or Debian's Open MPI (``_one_at_a_time``) run in one worker, one after another (see
    pytest_xdist_make_scheduler), and first, so that the other worker takes the rest meanwhile
    instead of the group running alone at the end.  Every worker orders its collection alike;
    without xdist nothing changes."""
    import tiers

    if config.args_source == pytest.Config.ArgsSource.TESTPATHS:
        problems = tiers.check([item.nodeid for item in items])
        if problems:
            raise pytest.UsageError("tests/tiers.py: " + "; ".join(problems))
    if not _full_tier(config):
        left = [item for item in items if tiers.full_only(item.nodeid)]
        if left:
            chosen = set(map(id, left))
            items[:] = [item for item in items if id(item) not in chosen]
            config.hook.pytest_deselected(items=left)
    if hasattr(config, "workerinput"):
        serial = [item for item in items if _one_at_a_time(item.nodeid)]
        chosen = set(map(id, serial))
        rest = [item for item in items if id(item) not in chosen]
        rank = {path: i for i, path in enumerate(LONGEST_FIRST)}
        rest.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))   # stable: files stay whole
        items[:] = serial + rest


def pytest_xdist_make_scheduler(config, log):
    """Files one at a time as workers free up (xdist's ``loadfile``), except the ``_one_at_a_time``
    tests: one unit, so one worker runs them all (the Slurm tests share the cluster's nodes and ports, and
    some count the jobs running on it).  The rule reads node ids only: a new Slurm test needs
    "slurm" in its file or test name.  xdist's own ``xdist_group`` mark cannot do this here: pytest 9
    derives node ids in a way xdist 3.8's group suffix no longer changes."""
    from xdist.scheduler import LoadScopeScheduling

    class OneUnitForTheSerialTests(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            # a file's tests stay together: its module fixtures (a two-rank run whose results
            # several tests read) run once, not once per run of its tests a worker is sent
            return "one-at-a-time" if _one_at_a_time(nodeid) else nodeid.split("::", 1)[0]

    # xdist sorts the units by their number of tests unless told not to: the long files, which
    # have few tests, then went last (--loadscope-reorder's default), the run's 9-minute tail
    config.option.loadscopereorder = False
    return OneUnitForTheSerialTests(config, log)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    import tiers

    if not _full_tier(config):
        terminalreporter.write_line(f"wml: the quick tier; {len(tiers.FULL_ONLY)} variants of real runs are left to "
                                    "`bash scripts/test --full` (tests/tiers.py names each one's quick-tier sibling)")
