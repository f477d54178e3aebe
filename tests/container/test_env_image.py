"""``wml env image SPEC|LOCK`` (issue 49, item 4): an Apptainer .def and a Containerfile rendered
from a curated spec or a lock, holding the same packages; ``--build`` with a builder present here
(Charliecloud's ch-image, Debian's charliecloud-builders), for real: a PyPI spec built into an
image whose base is the cached Debian image (python3-venv), then run with ch-run."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
from helpers.missing import skip_unless_ci
import yaml

from helpers import images

TINY = """\
name: tiny
kind: pypi
python: "3.11"
platforms: [linux-64]
requirements:
  - six==1.16.0
imports: [six]
"""


def wml(*args, cwd, env=None):
    return subprocess.run([sys.executable, "-m", "wmlce_tools", "env", "image", *args], cwd=cwd,
                          env={**os.environ, **(env or {})}, capture_output=True, text=True, timeout=300)


def test_conda_spec_renders_both_definitions_with_its_packages(tmp_path):
    from wmlce_tools.env.spec import find_spec, load_spec

    out = wml("wml-runtime", "-o", "img", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["img/Containerfile", "img/wml-runtime.def", "img/environment.yml"]
    spec = load_spec(find_spec("wml-runtime"))
    env = yaml.safe_load((tmp_path / "img/environment.yml").read_text())
    assert env["channels"] == spec.channels and env["dependencies"] == [p.spec for p in spec.packages]
    cf = (tmp_path / "img/Containerfile").read_text().splitlines()
    assert cf[1:4] == ["FROM mambaorg/micromamba:2.0.5", "USER root",
                       "COPY environment.yml /opt/wml-env/environment.yml"]
    assert "RUN micromamba create -y -p /opt/env -f /opt/wml-env/environment.yml && \\" in cf
    assert "    mkdir -p /opt/wml/wmlce_tools /opt/wml/ddl_runtime" in cf and "ENV PATH=/opt/env/bin:$PATH" in cf
    d = (tmp_path / "img/wml-runtime.def").read_text()
    assert "Bootstrap: docker\nFrom: mambaorg/micromamba:2.0.5\n" in d
    assert "%files\n    environment.yml /opt/wml-env/environment.yml\n" in d
    assert "%post\n    micromamba create -y -p /opt/env -f /opt/wml-env/environment.yml\n" in d
    assert "%environment\n    export PATH=/opt/env/bin:$PATH\n" in d


def test_a_lock_goes_in_as_it_is(tmp_path):
    lock = {"version": 1, "metadata": {"platforms": ["linux-64"], "channels": [{"url": "conda-forge"}]},
            "package": [{"name": "python", "version": "3.11.9", "manager": "conda", "platform": "linux-64",
                         "url": "https://conda.anaconda.org/conda-forge/linux-64/python-3.11.9.conda",
                         "hash": {"md5": "0" * 32}, "dependencies": {}}]}
    (tmp_path / "myenv-lock.yml").write_text(yaml.safe_dump(lock))
    out = wml("myenv-lock.yml", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "myenv-image/myenv-lock.yml").read_text() == (tmp_path / "myenv-lock.yml").read_text()
    assert "micromamba create -y -p /opt/env -f /opt/wml-env/myenv-lock.yml" in \
        (tmp_path / "myenv-image/myenv.def").read_text()


def test_pypi_spec_and_bad_input(tmp_path):
    (tmp_path / "tiny.yaml").write_text(TINY.replace('platforms', 'index: https://example.org/simple\nplatforms'))
    out = wml("tiny.yaml", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    cf = (tmp_path / "tiny-image/Containerfile").read_text()
    assert "FROM python:3.11-slim\n" in cf and "RUN python3 -m venv /opt/env && \\\n" in cf
    assert "/opt/env/bin/pip install --no-cache-dir --index-url https://example.org/simple -r " \
           "/opt/wml-env/requirements.txt" in cf
    assert (tmp_path / "tiny-image/requirements.txt").read_text() == "six==1.16.0\n"
    empty = tmp_path / "nobin"
    empty.mkdir()
    for args, env, line in [
            (("tiny.yaml", "--build"), {"PATH": str(empty)},
             "wml: error: no image builder on PATH (looked for apptainer, singularity, podman, buildah, ch-image); "
             "the definitions are written: build them where one is installed"),
            (("tiny.yaml", "--build", "--builder", "docker"), None,
             "wml: error: --builder 'docker': one of apptainer, singularity, podman, buildah, ch-image"),
            (("pylock.toml",), None, "wml: error: pylock.toml: a pylock.toml is not rendered into an image yet; "
             "give its spec (kind: pypi) or a requirements file"),
            (("nope.yaml",), None, "wml: error: spec file nope.yaml not found")]:
        bad = wml(*args, cwd=tmp_path, env=env)
        assert bad.returncode != 0 and bad.stderr.strip().splitlines() == [line], bad.stderr


@pytest.fixture(scope="session")
def ch_storage():
    """ch-image's storage with a base image: the cached Debian image with python3-venv, imported
    once per machine from a tar without its device nodes (tests/helpers/images.py)."""
    try:
        return images.ch_storage()
    except images.ImageUnavailable as e:
        skip_unless_ci(str(e))


def test_build_with_ch_image_and_run_it(ch_storage, tmp_path):
    (tmp_path / "tiny.yaml").write_text(TINY)
    env = {"CH_IMAGE_STORAGE": str(ch_storage), "USER": os.environ.get("USER") or "root"}
    tag = f"wml-test-tiny-{os.getpid()}"
    try:
        out = wml("tiny.yaml", "--build", "--builder", "ch-image", "--base", "wml-base-venv", "--tag", tag,
                  cwd=tmp_path, env=env)
        assert out.returncode == 0, out.stderr + (tmp_path / "tiny-image/build.log").read_text()[-2000:]
        assert f"wml: building tiny with ch-image (" in out.stderr and f"wml: built {tag} (ch-image)" in out.stderr
        # the last line says how to run it (issue 60)
        assert out.stderr.strip().splitlines()[-1].startswith(f"wml: run it: wml submit --container {tag} PROGRAM "
                                                              f"(Charliecloud: ch-run finds it in ch-image's storage {ch_storage};")
        run = subprocess.run(["ch-run", "--set-env", tag, "--", "python3", "-c",      # the image's ENV PATH
                              "import six, os; print(six.__file__, os.path.isdir('/opt/wml/ddl_runtime'))"],
                             env={**os.environ, **env}, capture_output=True, text=True, timeout=60)
        assert run.stdout.split() == ["/opt/env/lib/python3.11/site-packages/six.py", "True"], run.stderr
        # ... and so it runs: two ranks in the image by its name in ch-image's storage, each with the
        # image's environment (its PATH: /opt/env/bin's python, which has six), not the host's
        (tmp_path / "uses_six.py").write_text("import six, sys\nprint('SIX', six.__file__, sys.prefix, flush=True)\n")
        job = subprocess.run([sys.executable, "-m", "wmlce_tools", "submit", "--nodes", "2", "--container", tag,
                              "uses_six.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                             env={**os.environ, **env, "WML_JOBS_DIR": str(tmp_path / "wml-jobs")})
        log = next((tmp_path / "wml-jobs").glob("*/output.log")).read_text()
        assert job.returncode == 0, log
        six = sorted(l.split("SIX ", 1)[1] for l in log.splitlines() if "SIX /" in l)
        assert six == ["/opt/env/lib/python3.11/site-packages/six.py /opt/env"] * 2, log
    finally:
        subprocess.run(["/usr/bin/python3", shutil.which("ch-image"), "-s", str(ch_storage), "delete", tag],
                       capture_output=True, timeout=120, env={**os.environ, **env})
