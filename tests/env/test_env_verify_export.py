"""verify (sha256 of every file, imports), export (lockfile, explicit), pack (conda-pack)."""
from __future__ import annotations

import os
import subprocess
import tarfile
from pathlib import Path

from env_helpers import run_wml


def test_verify_ok(created_env: Path, cli):
    res = cli("env", "verify", "src")
    assert "OK (5 packages" in res.output and "2 imports" in res.output


def test_verify_detects_corruption_and_missing_files(created_env: Path):
    target = created_env / "bin" / "wml-greet"
    data = target.read_text()
    target.unlink()  # a new file: the package cache's hard link stays intact
    target.write_text(data.replace("greet", "GREET"))
    (created_env / "share" / "wml-base" / "VERSION").unlink()
    proc = run_wml("env", "verify", created_env)
    assert proc.returncode == 1
    assert "wml-greet-1.0-0: bin/wml-greet: sha256 mismatch" in proc.stdout
    assert "wml-base-2.0-0: share/wml-base/VERSION: missing" in proc.stdout
    assert proc.stderr.strip() == (f"wml: error: {created_env}: 2 file problem(s), "
                                   "0 pip script problem(s), 0 failed import(s); "
                                   f"to repair: wml env repair {created_env} (puts the packages' own files back), "
                                   "or re-create the env")


def test_verify_failing_import(created_env: Path, cli):
    res = cli("env", "verify", "src", "--import", "wml_conda_owned", "--import", "not_in_env", ok=False)
    assert res.exit_code == 1
    assert "import not_in_env: ModuleNotFoundError" in res.output


def test_export_lockfile_roundtrip(created_env: Path, cli, tmp_path: Path):
    from conda_lock.lockfile import parse_conda_lock_file

    out = tmp_path / "exported.yml"
    cli("env", "export", "src", "-o", out)
    parsed = parse_conda_lock_file(out)
    assert parsed.metadata.platforms == ["linux-64"]
    assert {d.name for d in parsed.package} == {"python", "wml-base", "wml-core", "wml-greet", "wml-pyutil"}
    cli("env", "create", out, "--prefix", tmp_path / "again", "--no-progress")
    out2 = subprocess.run([tmp_path / "again" / "bin" / "wml-greet"], capture_output=True, text=True)
    assert out2.stdout.strip() == f"greet from {tmp_path / 'again'}"


def test_export_explicit(created_env: Path, cli, tmp_path: Path, channel_url: str):
    from rattler.explicit_environment import ExplicitEnvironmentSpec

    res = cli("env", "export", "src", "--format", "explicit")
    assert "@EXPLICIT" in res.output
    path = tmp_path / "explicit.txt"
    path.write_text(res.output)
    spec = ExplicitEnvironmentSpec.from_path(path)
    urls = sorted(p.url for p in spec.packages)
    assert len(urls) == 5 and all(u.startswith(channel_url) for u in urls)


def test_pack_and_unpack_elsewhere(created_env: Path, cli, tmp_path: Path):
    archive = tmp_path / "src.tar.gz"
    cli("env", "pack", "src", "-o", archive)
    with tarfile.open(archive) as tar:
        names = tar.getnames()
    assert "bin/wml-greet" in names and "bin/conda-unpack" in names
    moved = tmp_path / "moved"
    cli("env", "pack", "src", "-o", tmp_path / "dir", "--format", "no-archive", "--dest-prefix", moved)
    os.rename(tmp_path / "dir", moved)
    out = subprocess.run([moved / "bin" / "wml-greet"], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == f"greet from {moved}"
    res = cli("env", "pack", "src", "-o", archive, ok=False)
    assert res.exit_code == 2 and "already exists" in res.output


def test_list_shows_specs_and_envs(created_env: Path, cli):
    import json

    res = cli("env", "list", "--json")
    data = json.loads(res.output)
    assert any(s["name"] == "wml-ce-pytorch" for s in data["specs"])
    env = next(e for e in data["envs"] if e["name"] == "src")
    assert env["platform"] == "linux-64" and env["size"] > 10_000
    table = cli("env", "list")
    assert "src" in table.output and "wml-ce-horovod-ddl" in table.output


def test_pack_refuses_a_damaged_env(created_env: Path, tmp_path: Path):
    (created_env / "share" / "wml-base" / "VERSION").unlink()
    out = tmp_path / "damaged.tar.gz"
    proc = run_wml("env", "pack", created_env, "-o", out)
    assert proc.returncode == 2
    assert proc.stderr.startswith("wml: error: conda-pack: Files managed by conda were found")
    assert "wml-base 2.0" in proc.stderr and proc.stderr.count("\n") == 1
    assert not out.exists()
