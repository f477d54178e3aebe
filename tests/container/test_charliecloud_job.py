"""A job's ranks inside a real container: Charliecloud's ch-run (unprivileged, user namespaces)
running an image made from Debian's packages alone (mmdebstrap of bookworm with python3; no
image registry).  The image is built once per machine and kept under the temporary directory
(``wml-test-images``); it has no torch, no numpy, no wml: wml's rank shim and ddl_runtime are
bound in read-only.  Each rank reads a file only the image has."""
from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

CACHE = Path(tempfile.gettempdir()) / "wml-test-images"
MARKER = "only-in-the-wml-test-image"

PROBE = """\
import json, os, sys
import ddl_runtime.core.jobenv
print("PROBE " + json.dumps({"rank": os.environ["RANK"], "world": os.environ["WORLD_SIZE"],
      "local": os.environ["LOCAL_RANK"], "os": open("/etc/os-release").readline().strip(),
      "marker": open("/wml-marker").read().strip(), "python": sys.executable,
      "arg": sys.argv[1:]}), flush=True)
"""


@pytest.fixture(scope="session")
def debian_image():
    for tool, pkg in (("ch-run", "charliecloud-runtime"), ("mmdebstrap", "mmdebstrap")):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed (apt-get install {pkg}; scripts/test installs it)")
    CACHE.mkdir(exist_ok=True)
    img = CACHE / "bookworm-python3"
    with open(CACHE / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)          # one build, whichever worker comes first
        if not (img / "wml-marker").exists():
            tar = CACHE / "bookworm-python3.tar"
            out = subprocess.run(["mmdebstrap", "--variant=minbase", "--include=python3", "bookworm", str(tar)],
                                 capture_output=True, text=True, timeout=600)
            if out.returncode != 0:
                pytest.skip("mmdebstrap could not build the image (is the Debian archive reachable?): "
                            + (out.stderr.strip().splitlines() or ["?"])[-1])
            shutil.rmtree(img, ignore_errors=True)
            img.mkdir()
            subprocess.run(["tar", "-xf", str(tar), "-C", str(img)], check=True, timeout=300)
            tar.unlink()
            for pkg in ("wmlce_tools", "ddl_runtime"):      # ch-run binds only onto directories the image has
                (img / "opt/wml" / pkg).mkdir(parents=True, exist_ok=True)
            (img / "wml-marker").write_text(MARKER + "\n")
    return img


@pytest.fixture
def job(run_wml, debian_image, tmp_path):
    (debian_image / str(tmp_path).lstrip("/")).mkdir(parents=True, exist_ok=True)   # the job's directory, bound
    (tmp_path / "probe.py").write_text(PROBE)
    (tmp_path / "needs_torch.py").write_text("import torch\nprint('PROBE ran')\n")

    def run(*args, timeout=180):
        return run_wml(*args, env={"USER": os.environ.get("USER") or "root"}, timeout=timeout)
    return run


def probes(text):
    return [json.loads(l.split("PROBE ", 1)[1]) for l in text.splitlines() if "PROBE {" in l]


def test_two_ranks_run_in_the_image(job, debian_image, tmp_path):
    out = job("submit", "--container", str(debian_image), "-N", "2", "probe.py", "a b")
    assert out.returncode == 0, out.stderr
    log = next((tmp_path / "wml-jobs").glob("*/output.log")).read_text()
    ranks = sorted(probes(log), key=lambda p: p["rank"])
    assert [p["rank"] for p in ranks] == ["0", "1"] and {p["world"] for p in ranks} == {"2"}
    assert {p["local"] for p in ranks} == {"0"}                 # one rank on each emulated node
    for p in ranks:
        assert p["marker"] == MARKER and "bookworm" in p["os"]
        assert p["python"] == "/usr/bin/python3" and p["arg"] == ["a b"]
    assert f"ch-run -b " in log and f" {debian_image} -- env PYTHONPATH=/opt/wml python3 -m wmlce_tools.ddlrun.rankexec" in log


def test_image_without_torch_fails_before_any_rank(job, debian_image, tmp_path):
    out = job("submit", "--container", str(debian_image), "-N", "2", "needs_torch.py")
    assert out.returncode != 0
    log = next((tmp_path / "wml-jobs").glob("*/output.log")).read_text()
    assert "the image lacks torch, which python3" in log and "needs_torch.py imports" in log
    assert "PROBE ran" not in log and "rankexec" not in log          # no rank started
    errors = [l for l in log.splitlines() if "error" in l]
    assert len(errors) == 1 and "Traceback" not in log, log


def test_missing_image_is_refused_at_submit(job, tmp_path):
    out = job("submit", "--container", str(tmp_path / "no-image"), "-N", "2", "probe.py")
    assert out.returncode == 2 and out.stderr.count("\n") == 1
    assert "no such image on this machine (charliecloud)" in out.stderr


def test_two_trial_sweep_in_the_image(job, debian_image, tmp_path):
    out = job("sweep", "--container", str(debian_image), "--param", "x=1,2", "--json", "probe.py", "{x}")
    assert out.returncode == 0, out.stderr
    run_dir = Path(json.loads(out.stdout.splitlines()[-1])["run_dir"])
    seen = {}
    for t in (0, 1):
        text = "".join(p.read_text() for p in sorted(set((run_dir / "trials" / str(t)).glob("*.log"))
                                                      | set((run_dir / "trials" / str(t)).glob("output*"))))
        got = probes(text)
        assert got and all(p["marker"] == MARKER for p in got), text
        seen[t] = {tuple(p["arg"]) for p in got}
    assert seen == {0: {("1",)}, 1: {("2",)}}


def test_chain_segment_runs_in_the_image(job, debian_image, tmp_path):
    out = job("submit", "--chain", "2", "-t", "20s", "--container", str(debian_image), "-N", "2", "probe.py")
    assert out.returncode == 0, out.stderr
    assert "finished in segment 1 of 2" in out.stderr + out.stdout
    logs = "".join(p.read_text() for p in (tmp_path / "wml-jobs").glob("*/segment-1/output.log"))
    got = probes(logs)
    assert sorted(p["rank"] for p in got) == ["0", "1"] and all(p["marker"] == MARKER for p in got), logs
