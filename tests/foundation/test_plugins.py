"""Schedulers and launchers from a package installed beside wml (entry points ``wml.schedulers``
and ``wml.launchers``, ``wmlce_tools/plugins.py``): a site names them, ``wml site validate`` and
``wml site schema`` accept them, ``wml render`` uses them; a broken plugin is one line naming it.
The plugin is a real installed distribution (a ``*.dist-info`` with ``entry_points.txt`` on the
path, what pip writes), read by importlib.metadata as any other."""
from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest

SITE = """\
name: flux-site
description: a site whose scheduler and launcher come from a plugin
scheduler: flux
launcher: flux-run
platform: linux-64
node: {sockets: 2, cores_per_socket: 8, threads_per_core: 1, gpus_per_socket: 2, memory_gb: 64}
total_nodes: 16
queues:
  pbatch: {default: true, max_nodes: 16, max_walltime: "12:00"}
docs: [https://flux-framework.readthedocs.io/en/latest/guides/admin-guide.html]
"""

SCHEDULER = '''\
from pathlib import Path

from wmlce_tools.schedulers import Scheduler


class Flux(Scheduler):
    name = "flux"
    template = "flux.sh.j2"
    template_dir = str(Path(__file__).parent / "templates")
    submit_tool = "flux"
    job_id_var = "FLUX_JOB_ID"

    def submit_argv(self, script):
        return ["flux", "batch", str(script)]

    def parse_submit(self, stdout):
        return stdout.strip()

    def output_paths(self, jobdir, job_name):
        return str(jobdir / "flux.out"), str(jobdir / "flux.err")
'''

LAUNCHER = '''\
def command(layout, ctx, program):
    return ["flux", "run", "-N", str(layout.nodes), "-n", str(layout.size),
            "--cores-per-task", str(layout.cpus_per_rank), *program]
'''

TEMPLATE = """\
#!/bin/bash
# flux plugin template for {{ site.name }}
#FLUX: -N {{ layout.nodes }}
#FLUX: -t {{ walltime_minutes }}m
#FLUX: --job-name={{ job_name }}
{% include "_body.sh.j2" %}
"""


def install(root: Path, name: str, entry_points: str, files: dict) -> Path:
    """A distribution as pip installs it: its modules and ``<name>-0.1.dist-info``."""
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    info = root / f"{name}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(textwrap.dedent(entry_points))
    (info / "RECORD").write_text("")
    return root


@pytest.fixture
def flux(tmp_path):
    site_dir = tmp_path / "sites"
    site_dir.mkdir()
    (site_dir / "flux-site.yaml").write_text(SITE)
    path = install(tmp_path / "site-packages", "wml_flux", """\
        [wml.schedulers]
        flux = wml_flux.scheduler:Flux

        [wml.launchers]
        flux-run = wml_flux.launcher:command
        """, {"wml_flux/__init__.py": "", "wml_flux/scheduler.py": SCHEDULER, "wml_flux/launcher.py": LAUNCHER,
              "wml_flux/templates/flux.sh.j2": TEMPLATE})
    pythonpath = os.pathsep.join(p for p in (str(path), os.environ.get("PYTHONPATH", "")) if p)
    return {"WML_SITE_PATH": str(site_dir), "PYTHONPATH": pythonpath}


def test_a_site_names_a_plugin_scheduler_and_launcher(run_wml, flux, tmp_path, program):
    ok = run_wml("site", "validate", str(Path(flux["WML_SITE_PATH"]) / "flux-site.yaml"), env=flux)
    assert ok.returncode == 0, ok.stderr
    assert "flux + flux-run" in ok.stdout
    schema = json.loads(run_wml("site", "schema", env=flux).stdout)
    props = schema["$defs"]["SiteProfile"]["properties"]
    assert "flux" in props["scheduler"]["enum"] and "slurm" in props["scheduler"]["enum"]
    assert "flux-run" in props["launcher"]["enum"] and "srun" in props["launcher"]["enum"]

    r = run_wml("render", "--site", "flux-site", "--nodes", "2", "--ranks-per-node", "4", "--walltime", "30",
                "--", "python", str(program), env=flux)
    assert r.returncode == 0, r.stderr
    script = r.stdout
    assert "#FLUX: -N 2" in script and "#FLUX: -t 30m" in script
    assert "flux run -N 2 -n 8 --cores-per-task 4 " in script        # the launcher line ddlrun will run
    assert "${FLUX_JOB_ID:-?}" in script                               # the job id as the plugin names it


def test_without_the_plugin_the_site_is_refused_in_one_line(run_wml, flux):
    env = dict(flux, PYTHONPATH=os.environ.get("PYTHONPATH", ""))
    r = run_wml("site", "validate", str(Path(flux["WML_SITE_PATH"]) / "flux-site.yaml"), env=env)
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "flux-site.yaml:3: scheduler: Invalid enum value 'flux' (known: cobalt, local" in r.stderr
    assert "wml.schedulers" in r.stderr


def test_a_broken_plugin_is_one_line_naming_it(run_wml, flux, tmp_path, program):
    broken = install(tmp_path / "broken", "wml_broken", """\
        [wml.launchers]
        flux-run = wml_broken_launcher:command
        """, {"wml_broken_launcher.py": "import no_such_module_here\n"})
    # the same name twice (wml_flux's and wml_broken's): an error naming both
    env = dict(flux, PYTHONPATH=os.pathsep.join([str(broken), flux["PYTHONPATH"]]))
    r = run_wml("render", "--site", "flux-site", "--nodes", "1", "--", "python", str(program), env=env)
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "launcher 'flux-run' is named by 2 plugins" in r.stderr and "wml_broken 0.1" in r.stderr

    # alone, it names itself and why it does not load
    env = dict(flux, PYTHONPATH=os.pathsep.join([str(broken), flux["PYTHONPATH"]]))
    (Path(flux["PYTHONPATH"].split(os.pathsep)[0]) / "wml_flux-0.1.dist-info" / "entry_points.txt").write_text(
        "[wml.schedulers]\nflux = wml_flux.scheduler:Flux\n")
    r = run_wml("render", "--site", "flux-site", "--nodes", "1", "--", "python", str(program), env=env)
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert ("the launcher plugin 'flux-run' (flux-run = wml_broken_launcher:command in wml_broken 0.1) does not load: "
            "ModuleNotFoundError: No module named 'no_such_module_here'") in r.stderr


def test_importing_the_registries_imports_no_scheduler_or_launcher(isolated_env):
    """No registration by import side effect: a name is loaded when it is looked up."""
    import subprocess
    import sys

    code = ("import sys, wmlce_tools.schedulers, wmlce_tools.launchers\n"
            "print(sorted(m for m in sys.modules if m.startswith(('wmlce_tools.schedulers.', 'wmlce_tools.launchers.'))))\n"
            "wmlce_tools.schedulers.get_scheduler('pbs')\n"
            "print(sorted(m for m in sys.modules if m.startswith(('wmlce_tools.schedulers.', 'wmlce_tools.launchers.'))))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=isolated_env, timeout=60)
    assert out.returncode == 0, out.stderr
    before, after = out.stdout.splitlines()
    assert before == "['wmlce_tools.schedulers.commands']"
    assert after == "['wmlce_tools.schedulers.commands', 'wmlce_tools.schedulers.pbs']"
