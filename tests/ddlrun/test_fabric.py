"""The site's fabric (``fabric:`` in the profile) on real ranks: ddlrun with pip's MPICH on the
local site (emulated nodes) gives every rank the variables of its case, keeps a variable the
user set (exported before, or ``-x``), makes the per-node directories, and says where each
value came from; ``ddlrun --check`` looks for the network plugin and loads it; a multi-node
GPU launch without the plugin gets one warning line naming the module."""
from __future__ import annotations

import _ctypes
import json
import shutil
import sys

import pytest

PAGE = "https://example.org/centre/fabric"

SITE = """\
name: fabtest
description: this machine with a fabric section (tests only)
scheduler: local
launcher: mpiexec
platform: linux-64
node: {{sockets: 1, cores_per_socket: 2, threads_per_core: 1, gpus_per_socket: 4}}
total_nodes: 8
fabric:
  library: nccl
  plugin: {{library: libwmltest-net.so, module: wml-test-plugin, paths: ["{plugin_dir}"], page: "{page}", checked: "2026-11-28"}}
  settings:
    - env: {{FAB_ALL: "1", FAB_NET: Socket, FAB_DIR: "{tmp}/cache-$USER"}}
      page: "{page}"
      checked: "2026-11-28"
    - nodes: several
      env: {{FAB_NET: OFI, FAB_X: from-page}}
      prepend: {{LD_LIBRARY_PATH: /opt/wml-test/lib}}
      page: "{page}/several"
      checked: "2026-11-28"
  node_dirs:
    - variables: [FAB_DIR]
      page: "{page}"
      checked: "2026-11-28"
"""

SHOW = """\
import json, os
keys = ("RANK", "FAB_ALL", "FAB_NET", "FAB_X", "FAB_DIR", "LD_LIBRARY_PATH")
info = {k: os.environ.get(k) for k in keys}
info["dir_made"] = os.path.isdir(os.environ.get("FAB_DIR", "/nonexistent"))
print("ENV " + json.dumps(info), flush=True)
"""


@pytest.fixture
def fab(site_dir, tmp_path):
    plugin_dir = tmp_path / "plugin"
    plugin_dir.mkdir()
    (site_dir / "fabtest.yaml").write_text(SITE.format(plugin_dir=plugin_dir, page=PAGE, tmp=tmp_path))
    show = tmp_path / "show.py"
    show.write_text(SHOW)
    return plugin_dir, show


def _ranks(stdout: str):
    return sorted((json.loads(l.split("ENV ", 1)[1]) for l in stdout.splitlines() if "ENV " in l),
                  key=lambda d: int(d["RANK"]))


def test_every_rank_gets_the_case_and_the_user_wins(ddlrun, fab, tmp_path):
    plugin_dir, show = fab
    shutil.copy(_ctypes.__file__, plugin_dir / "libwmltest-net.so")   # a real shared library
    r = ddlrun("--site", "fabtest", "-n", "4", "--emulate-nodes", "2", "-x", "FAB_X=mine", "--",
               sys.executable, str(show), env={"FAB_NET": "user-net", "USER": "tester", "LD_LIBRARY_PATH": "/usr/local/lib"})
    assert r.returncode == 0, r.stderr
    ranks = _ranks(r.stdout)
    assert [d["RANK"] for d in ranks] == ["0", "1", "2", "3"]
    for d in ranks:
        assert d["FAB_ALL"] == "1"                                  # the page's value
        assert d["FAB_NET"] == "user-net"                           # exported before: kept
        assert d["FAB_X"] == "mine"                                 # -x: wins
        assert d["FAB_DIR"] == f"{tmp_path}/cache-tester" and d["dir_made"]
        assert d["LD_LIBRARY_PATH"] == "/opt/wml-test/lib:/usr/local/lib"
    assert not any("warning" in l for l in r.error_lines), r.stderr     # the plugin is there


def test_dry_run_names_each_value_and_its_page(ddlrun, fab):
    _, show = fab
    one = ddlrun("--site", "fabtest", "-n", "2", "--dry-run", "--", sys.executable, str(show))
    several = ddlrun("--site", "fabtest", "-n", "4", "--emulate-nodes", "2", "--dry-run", "--", sys.executable, str(show),
                     env={"FAB_ALL": "0"})
    assert one.returncode == 0 and several.returncode == 0, (one.stderr, several.stderr)
    assert "# fabric (site fabtest): nccl on 1 node(s), bare" in one.stdout
    assert f"#   FAB_NET=Socket  <- {PAGE} (checked 2026-11-28)" in one.stdout
    assert "FAB_X" not in one.stdout
    assert f"#   FAB_NET=OFI  <- {PAGE}/several (checked 2026-11-28)" in several.stdout
    assert "#   FAB_ALL=0  <- set before the launch; the page says 1" in several.stdout
    assert "#   made on each node before the program: $FAB_DIR" in several.stdout


def test_missing_plugin_is_one_warning_line_naming_the_module(ddlrun, fab):
    _, show = fab
    r = ddlrun("--site", "fabtest", "-n", "4", "--emulate-nodes", "2", "--", sys.executable, str(show))
    assert r.returncode == 0, r.stderr
    warnings = [l for l in r.error_lines if "warning" in l]
    assert len(warnings) == 1 and "libwmltest-net.so not found" in warnings[0], r.stderr
    assert "load module wml-test-plugin" in warnings[0] and PAGE in warnings[0]
    assert r.error_lines.index(warnings[0]) < min(i for i, l in enumerate(r.error_lines) if "mpiexec" in l)
    assert len(_ranks(r.stdout)) == 4          # a warning, not a refusal


@pytest.mark.parametrize("plugin", ["loads", "broken", "absent"])
def test_check_reports_the_plugin(ddlrun, fab, plugin):
    plugin_dir, _ = fab
    if plugin == "loads":
        shutil.copy(_ctypes.__file__, plugin_dir / "libwmltest-net.so")
    elif plugin == "broken":
        (plugin_dir / "libwmltest-net.so").write_text("not a library\n")
    r = ddlrun("--site", "fabtest", "-n", "4", "--emulate-nodes", "2", "--gpus-per-rank", "0", "--check")   # no GPUs here
    assert r.returncode == 0, r.stderr
    lines = [l for l in r.error_lines if l.startswith("ddlrun: fabric:") or "warning" in l]
    found = f"plugin libwmltest-net.so: found at {plugin_dir / 'libwmltest-net.so'}"
    if plugin == "loads":
        assert any(found + " (loads)" in l for l in lines), r.stderr
    elif plugin == "broken":
        assert any(found + " (does not load: " in l for l in lines), r.stderr
    else:
        assert any("plugin libwmltest-net.so: not found" in l for l in lines), r.stderr
    warnings = [l for l in lines if "warning" in l]
    assert len(warnings) == (plugin == "absent") and all("load module wml-test-plugin" in w for w in warnings)
    assert "ddlrun: fabric: FAB_NET=OFI <- https://example.org/centre/fabric/several (checked 2026-11-28)" in lines


def test_a_local_job_script_gives_each_rank_the_fabric_and_keeps_the_users(run_wml, fab, site_dir, tmp_path):
    """The whole path on the local site: the rendered job script shows the page's values, ddlrun
    (MPICH) gives them to every rank unless set; exported at submit -> kept; --export -> wins."""
    plugin_dir, show = fab
    shutil.copy(_ctypes.__file__, plugin_dir / "libwmltest-net.so")
    r = run_wml("submit", "--site", "fabtest", "--nodes", "2", "--ranks-per-node", "2", "--json",
                "--export", "FAB_X=exported", sys.executable, str(show),
                env={"WML_SITE_PATH": str(site_dir), "FAB_NET": "user-net", "USER": "tester"})
    assert r.returncode == 0, r.stderr
    job = json.loads(r.stdout)["job_id"]
    script = run_wml("render", "--site", "fabtest", "--nodes", "2", "--ranks-per-node", "2",
                     sys.executable, str(show), env={"WML_SITE_PATH": str(site_dir)}).stdout
    assert f"#     FAB_NET=OFI  <- {PAGE}/several (checked 2026-11-28)" in script    # ddlrun decides: no export
    assert "export FAB_NET" not in script
    logs = run_wml("logs", job, env={"WML_SITE_PATH": str(site_dir)})
    ranks = _ranks(logs.stdout)
    assert len(ranks) == 4, logs.stdout + logs.stderr
    for d in ranks:
        assert (d["FAB_ALL"], d["FAB_NET"], d["FAB_X"]) == ("1", "user-net", "exported")
        assert d["FAB_DIR"] == f"{tmp_path}/cache-tester" and d["dir_made"]


def test_the_plugin_is_looked_for_as_the_library_loads_it(tmp_path):
    """NCCL_NET_PLUGIN: a path is that file; a word (ofi) names libnccl-net-ofi.so; else the
    library's own name on LD_LIBRARY_PATH and the profile's paths."""
    from wmlce_tools.fabric.probe import find_plugin

    lib, extra = tmp_path / "lib", tmp_path / "extra"
    lib.mkdir(), extra.mkdir()
    (lib / "libnccl-net-ofi.so").write_text("")
    (extra / "libwmltest-net.so").write_text("")
    env = {"LD_LIBRARY_PATH": f"/nonexistent:{lib}"}
    assert find_plugin("libwmltest-net.so", [], env) is None
    assert find_plugin("libwmltest-net.so", [str(extra)], env) == str(extra / "libwmltest-net.so")
    assert find_plugin("libwmltest-net.so", [], {**env, "NCCL_NET_PLUGIN": "ofi"}) == str(lib / "libnccl-net-ofi.so")
    assert find_plugin("libwmltest-net.so", [str(extra)], {"NCCL_NET_PLUGIN": str(lib / "libnccl-net-ofi.so")}) == str(lib / "libnccl-net-ofi.so")
    assert find_plugin("libwmltest-net.so", [str(extra)], {"NCCL_NET_PLUGIN": str(lib / "gone.so")}) is None
