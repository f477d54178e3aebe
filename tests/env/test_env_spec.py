"""Spec loading: wml specs, conda environment.yml, selectors, errors with file:line."""
from __future__ import annotations

from pathlib import Path

import pytest

from wmlce_tools.env.spec import bundled_spec_paths, find_spec, load_spec
from wmlce_tools.errors import WmlError


def test_bundled_specs_load_for_each_of_their_platforms():
    paths = bundled_spec_paths()
    names = {load_spec(p).name for p in paths}
    assert {"wml-ce-pytorch", "wml-ce-tensorflow", "wml-ce-horovod-ddl", "wml-ce-rapids",
            "wml-runtime"} <= names
    for path in paths:
        spec = load_spec(path)
        assert spec.imports, f"{path} names no imports for verify"
        if hasattr(spec, "requirements"):      # a PyPI spec (kind: pypi)
            continue
        assert spec.platforms, path
        for platform in spec.platforms:
            assert spec.packages_for(platform), (path, platform)


def test_bundled_pytorch_spec_differs_per_platform():
    spec = load_spec(find_spec("wml-ce-pytorch"))
    x86 = spec.packages_for("linux-64")
    ppc = spec.packages_for("linux-ppc64le")
    assert x86 != ppc
    assert any(p.startswith("powerai-license") for p in ppc)
    assert not any(p.startswith("powerai-license") for p in x86)
    assert spec.virtual_packages_for("linux-ppc64le")["__cuda"]


def test_selectors_and_platform_lists(spec_file: Path):
    spec = load_spec(spec_file)
    assert "python 3.11.*" in spec.packages_for("linux-64")
    assert "python 3.11.*" not in spec.packages_for("linux-ppc64le")
    assert "python" in spec.packages_for("linux-ppc64le")
    assert "wml-base >=2" in spec.packages_for("linux-64")
    assert spec.imports == ["wml_conda_owned", "wml_pyutil"]


def test_environment_yml(tmp_path: Path):
    path = tmp_path / "environment.yml"
    path.write_text(
        "name: plain\nchannels: [conda-forge, nodefaults]\nplatforms: [linux-64]\n"
        "dependencies:\n  - numpy >=1.20\n  - mpich  # [linux64]\n  - pip:\n    - horovod==0.19.0\n")
    spec = load_spec(path)
    assert spec.channels == ["conda-forge"]
    assert spec.pip == ["horovod==0.19.0"]
    assert spec.packages_for("linux-64") == ["numpy >=1.20", "mpich", "pip"]


@pytest.mark.parametrize("text, line, words", [
    ("name: x\nchannels: [c]\npackages:\n  - a\n  - [b\n", 5, "malformed YAML"),
    ("name: x\nchannels: [c]\npackages:\n  - numpy\n  - 'bad[[spec'\n", 5, "not a conda match spec"),
    ("name: x\nchannels: [c]\nplatforms: [linux-64, win-32]\npackages: [a]\n", 3, "unknown platform"),
    ("name: x\nchannels: [c]\npackages:\n  - {spec: a, platforms: [osx-64]}\n", 4, "not in the spec's platforms"),
])
def test_malformed_spec_names_file_and_line(tmp_path: Path, text: str, line: int, words: str):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(WmlError) as err:
        load_spec(path)
    msg = str(err.value)
    assert msg.startswith(f"{path}:{line}: "), msg
    assert words in msg
    assert "\n" not in msg


def test_platform_outside_spec(spec_file: Path):
    spec = load_spec(spec_file)
    with pytest.raises(WmlError, match="not one of spec 'fixture'"):
        spec.packages_for("osx-arm64")


def test_unknown_spec_name():
    with pytest.raises(WmlError, match="unknown spec 'no-such-stack'"):
        find_spec("no-such-stack")
