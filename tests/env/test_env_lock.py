"""Locking with py-rattler into conda-lock's unified lockfile."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from env_helpers import run_wml


def test_lock_both_platforms_parsed_by_conda_lock(lockfile: Path, channel_url: str):
    from conda_lock.lockfile import parse_conda_lock_file

    parsed = parse_conda_lock_file(lockfile)
    assert sorted(parsed.metadata.platforms) == ["linux-64", "linux-ppc64le"]
    assert [c.url for c in parsed.metadata.channels] == [channel_url]
    assert set(parsed.metadata.content_hash) == {"linux-64", "linux-ppc64le"}
    by_platform: dict[str, dict[str, object]] = {}
    for dep in parsed.package:
        by_platform.setdefault(dep.platform, {})[dep.name] = dep
    for platform in ("linux-64", "linux-ppc64le"):
        pkgs = by_platform[platform]
        assert set(pkgs) == {"wml-greet", "wml-core", "wml-base", "python", "wml-pyutil"}
        assert pkgs["wml-pyutil"].url.endswith("/noarch/wml-pyutil-1.0-pyh0.tar.bz2")
        assert pkgs["wml-core"].url.endswith(f"/{platform}/wml-core-1.0-h0.tar.bz2")
        assert pkgs["wml-greet"].url.endswith("/noarch/wml-greet-1.0-0.tar.bz2")
        assert pkgs["wml-base"].version == "2.0"  # highest that wml-core >=2 allows
        assert pkgs["wml-core"].dependencies["wml-base"] == ">=2"
        assert len(pkgs["wml-core"].hash.sha256) == 64 and pkgs["wml-core"].hash.md5
    # rattler reads it too (that is what create installs from)
    import rattler

    lf = rattler.LockFile.from_path(lockfile)
    assert sorted(p.name for p in lf.platforms()) == ["linux-64", "linux-ppc64le"]


def test_unchanged_spec_is_not_resolved(tmp_path: Path, write_spec, channel: Path, cli):
    # a private copy of the channel, so it can be broken after the first lock
    chan = tmp_path / "chan"
    shutil.copytree(channel, chan)
    spec = write_spec(channel=chan.as_uri())
    out = tmp_path / "conda-lock.yml"
    first = cli("env", "lock", spec, "-f", out)
    assert "locked 5 packages" in first.output
    before = out.read_text()
    for repodata in chan.glob("*/repodata.json"):
        repodata.unlink()  # any solve now fails
    again = cli("env", "lock", spec, "-f", out)
    assert "up to date" in again.output
    assert out.read_text() == before
    # a changed spec is re-solved (and so now fails against the broken channel)
    spec.write_text(spec.read_text().replace("- wml-greet", "- wml-greet >=1"))
    changed = cli("env", "lock", spec, "-f", out, ok=False)
    assert changed.exit_code == 2
    assert "unreachable" in changed.output and chan.as_uri() in changed.output
    assert out.read_text() == before  # the old lockfile is untouched


def test_lock_one_platform_then_add_other(tmp_path: Path, spec_file: Path, cli):
    from conda_lock.lockfile import parse_conda_lock_file

    out = tmp_path / "conda-lock.yml"
    cli("env", "lock", spec_file, "-f", out, "-p", "linux-ppc64le")
    assert parse_conda_lock_file(out).metadata.platforms == ["linux-ppc64le"]
    res = cli("env", "lock", spec_file, "-f", out)
    assert "linux-64: locked" in res.output
    parsed = parse_conda_lock_file(out)
    assert sorted(parsed.metadata.platforms) == ["linux-64", "linux-ppc64le"]
    assert {d.platform for d in parsed.package} == {"linux-64", "linux-ppc64le"}


def test_environment_yml_locks(tmp_path: Path, channel_url: str, cli):
    from conda_lock.lockfile import parse_conda_lock_file

    env_yml = tmp_path / "environment.yml"
    env_yml.write_text(f"name: plain\nchannels: [{channel_url}]\nplatforms: [linux-64]\n"
                       "virtual_packages: {__glibc: '2.28'}\n"
                       "dependencies:\n  - wml-core\n  - wml-greet  # [linux64]\n")
    out = tmp_path / "conda-lock.yml"
    cli("env", "lock", env_yml, "-f", out)
    names = {d.name for d in parse_conda_lock_file(out).package}
    assert names == {"wml-core", "wml-base", "wml-greet"}


def test_channel_option_replaces_spec_channels(tmp_path: Path, write_spec, channel: Path, cli):
    spec = write_spec(channel="https://conda.invalid/nothing-here")
    out = tmp_path / "conda-lock.yml"
    cli("env", "lock", spec, "-f", out, "--channel", str(channel))
    assert channel.as_uri() in out.read_text()


@pytest.mark.parametrize("extra_pkg, words", [
    ("no-such-package", "No candidates were found for no-such-package"),
    ("wml-base <2\n  - wml-core", "wml-base"),
])
def test_unsatisfiable_is_one_line(tmp_path: Path, write_spec, extra_pkg: str, words: str):
    spec = write_spec()
    spec.write_text(spec.read_text().replace("  - wml-greet\n", f"  - wml-greet\n  - {extra_pkg}\n"))
    out = tmp_path / "conda-lock.yml"
    proc = run_wml("env", "lock", spec, "-f", out)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("wml: error: cannot solve for linux-"), proc.stderr
    assert words in lines[0]
    assert "Traceback" not in proc.stderr
    assert not out.exists()


def test_unreachable_channel_is_named(tmp_path: Path, write_spec):
    spec = write_spec(channel="http://127.0.0.1:9/wml-mirror")
    proc = run_wml("env", "lock", spec, "-f", tmp_path / "conda-lock.yml")
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1
    assert "channel http://127.0.0.1:9/wml-mirror is unreachable" in proc.stderr
    assert "give a local mirror of the channel: -c file:///" in proc.stderr      # no network: say what works


def test_missing_local_channel_is_named(tmp_path: Path, write_spec):
    spec = write_spec(channel=str(tmp_path / "nowhere"))
    proc = run_wml("env", "lock", spec, "-f", tmp_path / "conda-lock.yml")
    assert proc.returncode == 2 and "unreachable" in proc.stderr
    assert (tmp_path / "nowhere").as_uri() in proc.stderr


def test_platform_outside_spec_list(tmp_path: Path, spec_file: Path):
    proc = run_wml("env", "lock", spec_file, "-p", "osx-arm64", "-f", tmp_path / "l.yml")
    assert proc.returncode == 2
    assert "platform 'osx-arm64' is not one of spec 'fixture'" in proc.stderr
    assert not (tmp_path / "l.yml").exists()


def test_malformed_spec_cli(tmp_path: Path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nchannels: [c]\npackages:\n  - a\n  - [b\n")
    proc = run_wml("env", "lock", bad)
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"wml: error: {bad}:5: malformed YAML")
    assert proc.stderr.count("\n") == 1


def test_lockfile_in_missing_directory(tmp_path: Path, spec_file: Path):
    proc = run_wml("env", "lock", spec_file, "-f", tmp_path / "no" / "dir" / "conda-lock.yml")
    assert proc.returncode == 2 and "does not exist" in proc.stderr
    assert not (tmp_path / "no").exists()


def test_lockfile_directory_checked_before_solving(tmp_path: Path, write_spec):
    """A lockfile that cannot be written is refused before the (possibly long) solve: the
    channel here does not exist, and the error is still the directory's."""
    spec = write_spec(channel=(tmp_path / "no-such-channel").as_uri())
    proc = run_wml("env", "lock", spec, "-f", tmp_path / "missing" / "conda-lock.yml")
    assert proc.returncode == 2
    assert proc.stderr == (f"wml: error: cannot write lockfile {tmp_path / 'missing' / 'conda-lock.yml'}: "
                           f"directory {tmp_path / 'missing'} does not exist\n")
    assert not (tmp_path / "missing").exists()


def test_conda_style_exact_versions(tmp_path: Path, write_spec, cli):
    """'name 1.0' means ==1.0 to conda; rattler's strict parser would refuse it."""
    from conda_lock.lockfile import parse_conda_lock_file

    spec = write_spec()
    spec.write_text(spec.read_text().replace("  - wml-greet\n", "  - wml-greet 1.0\n  - wml-base 2.0\n"))
    out = tmp_path / "conda-lock.yml"
    cli("env", "lock", spec, "-f", out)
    versions = {d.name: d.version for d in parse_conda_lock_file(out).package}
    assert versions["wml-greet"] == "1.0" and versions["wml-base"] == "2.0"


def test_conda_lock_cli_renders_the_lockfile(lockfile: Path, tmp_path: Path, channel_url: str):
    """conda-lock's own command line accepts the file (render needs no conda executable)."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "conda_lock", "render", "--kind", "explicit",
                           "-p", "linux-64", "-p", "linux-ppc64le", str(lockfile)],
                          cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    ppc = (tmp_path / "conda-linux-ppc64le.lock").read_text()
    assert "@EXPLICIT" in ppc
    assert f"{channel_url}/linux-ppc64le/wml-core-1.0-h0.tar.bz2#" in ppc
