"""The job registry: real SQLite files, real concurrent processes, real locks."""
from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from wmlce_tools.errors import WmlError
from wmlce_tools.jobs.registry import JobRecord, Registry, default_path
from wmlce_tools.schedulers.states import FINAL_STATES, JobState

pytestmark = pytest.mark.timeout(120)

REPO = Path(__file__).resolve().parents[2]


def _rec(job_id="101", site="local-slurm", **kw):
    base = dict(site=site, scheduler="slurm", job_id=job_id, name="train", job_dir="/jobs/train-1",
                script="/jobs/train-1/job.sh", output=f"/jobs/train-1/train.{job_id}.out",
                error=f"/jobs/train-1/train.{job_id}.err", submit_command="sbatch --parsable /jobs/train-1/job.sh")
    base.update(kw)
    return JobRecord(**base)


@pytest.fixture
def reg(tmp_path):
    return Registry(tmp_path / "data" / "jobs.sqlite")


def test_states_are_the_documented_set():
    assert [s.value for s in JobState] == ["PENDING", "RUNNING", "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT",
                                           "UNKNOWN"]
    assert FINAL_STATES == {JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED, JobState.TIMEOUT}
    assert JobState.parse("running") is JobState.RUNNING
    assert JobState.parse("nonsense") is JobState.UNKNOWN
    assert str(JobState.FAILED) == "FAILED" and JobState.FAILED.final and not JobState.PENDING.final


def test_add_get_roundtrip_creates_file_and_dir(reg):
    assert not reg.path.exists()
    t0 = time.time()
    added = reg.add(_rec())
    assert reg.path.is_file()
    assert added.id == 1
    got = reg.get(1)
    assert got == added
    assert got.state is JobState.PENDING and got.exit_code is None
    assert t0 - 1 <= got.submitted_at <= time.time()
    for field in ("site", "scheduler", "job_id", "name", "job_dir", "script", "output", "error", "submit_command"):
        assert getattr(got, field) == getattr(_rec(), field)
    # WAL: readers never wait for the writer.
    with sqlite3.connect(reg.path) as c:
        assert c.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_get_by_scheduler_id_local_id_and_explicit_local(reg):
    a = reg.add(_rec("5001"))
    b = reg.add(_rec("1"))          # a scheduler id that equals a's local id
    assert reg.get("5001").id == a.id
    assert reg.get(a.id).job_id == "5001"             # int: always the local id
    assert reg.get("1").id == b.id                    # text: the scheduler's id wins
    assert reg.get("id:1").id == a.id                 # explicit local id
    assert reg.get("2").id == b.id                    # no scheduler id 2: local id 2
    assert reg.get(b).id == b.id


def test_same_scheduler_id_newest_wins_and_site_narrows(reg):
    old = reg.add(_rec("7", site="local-slurm"))
    other = reg.add(_rec("7", site="summit", scheduler="lsf"))
    assert reg.get("7").id == other.id
    assert reg.get("7", site="local-slurm").id == old.id


def test_unknown_job_is_a_clear_error(reg):
    reg.add(_rec())
    with pytest.raises(WmlError) as e:
        reg.get("424242")
    assert str(e.value) == "no job '424242' in the registry (see `wml jobs`)"
    with pytest.raises(WmlError, match="no job 'nope'"):
        reg.update_state("nope", JobState.RUNNING)


def test_update_state_and_exit_code(reg):
    rec = reg.add(_rec())
    r1 = reg.update_state("101", JobState.RUNNING)
    assert r1.state is JobState.RUNNING and r1.exit_code is None
    assert r1.updated_at >= rec.updated_at
    r2 = reg.update_state(rec.id, "FAILED", 3)
    assert (r2.state, r2.exit_code) == (JobState.FAILED, 3)
    r3 = reg.update_state(rec, JobState.FAILED)          # exit code kept when not given
    assert r3.exit_code == 3
    assert reg.get(rec.id).state is JobState.FAILED


def test_list_newest_first_limit_site_states(reg):
    for i in range(5):
        reg.add(_rec(str(100 + i), site="a" if i % 2 else "b"))
    reg.update_state("102", JobState.COMPLETED, 0)
    assert [r.job_id for r in reg.list()] == ["104", "103", "102", "101", "100"]
    assert [r.job_id for r in reg.list(limit=2)] == ["104", "103"]
    assert [r.job_id for r in reg.list(site="a")] == ["103", "101"]
    assert [r.job_id for r in reg.list(states=[JobState.COMPLETED])] == ["102"]
    assert len(reg.list(limit=None)) == 5


def test_as_dict_is_json_ready(reg):
    d = reg.add(_rec()).as_dict()
    assert json.loads(json.dumps(d))["state"] == "PENDING"
    assert d["id"] == 1


def test_default_path_honours_wml_data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("WML_DATA_DIR", str(tmp_path / "d"))
    assert default_path() == tmp_path / "d" / "jobs.sqlite"
    assert Registry().path == tmp_path / "d" / "jobs.sqlite"
    monkeypatch.delenv("WML_DATA_DIR")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert default_path() == tmp_path / "xdg" / "wml" / "jobs.sqlite"


# -- concurrency -----------------------------------------------------------------------
ADDER = textwrap.dedent("""
    import sys, time
    from wmlce_tools.jobs.registry import JobRecord, Registry
    path, tag, n, start = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    while time.time() < start:        # both processes begin at the same instant
        time.sleep(0.001)
    reg = Registry(path)
    for i in range(n):
        reg.add(JobRecord(site="s", scheduler="slurm", job_id=f"{tag}-{i}", name=tag))
        if i % 5 == 0:
            reg.update_state(f"{tag}-{i}", "RUNNING")
            reg.list(limit=3)
    print("done", tag)
""")


def test_two_processes_adding_at_once_are_both_recorded(tmp_path):
    path = tmp_path / "jobs.sqlite"
    n = 40
    start = time.time() + 1.0
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    procs = [subprocess.Popen([sys.executable, "-c", ADDER, str(path), tag, str(n), str(start)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for tag in ("a", "b")]
    for p in procs:
        out, err = p.communicate(timeout=90)
        assert p.returncode == 0, err
        assert out.startswith("done")
    records = Registry(path).list(limit=None)
    assert len(records) == 2 * n
    assert {r.job_id for r in records} == {f"{t}-{i}" for t in "ab" for i in range(n)}
    assert len({r.id for r in records}) == 2 * n
    assert sum(r.state is JobState.RUNNING for r in records) == 2 * len(range(0, n, 5))


def test_first_use_by_two_processes_at_once(tmp_path):
    """Both create the schema on a file that does not exist yet."""
    path = tmp_path / "fresh" / "jobs.sqlite"
    start = time.time() + 0.8
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    procs = [subprocess.Popen([sys.executable, "-c", ADDER, str(path), tag, "1", str(start)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for tag in ("x", "y", "z")]
    for p in procs:
        _, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
    assert sorted(r.job_id for r in Registry(path).list()) == ["x-0", "y-0", "z-0"]


# -- faults ----------------------------------------------------------------------------
def _one_line(e: WmlError) -> str:
    msg = str(e)
    assert "\n" not in msg and "Traceback" not in msg
    return msg


def test_corrupted_file_is_a_clear_error(tmp_path):
    path = tmp_path / "jobs.sqlite"
    path.write_bytes(b"this is not an SQLite database at all\n" * 200)
    for op in (lambda r: r.list(), lambda r: r.add(_rec()), lambda r: r.get("1")):
        with pytest.raises(WmlError) as e:
            op(Registry(path))
        msg = _one_line(e.value)
        assert f"job registry {path} is corrupted" in msg
        assert "move it aside" in msg


def test_damaged_pages_are_a_clear_error(tmp_path):
    path = tmp_path / "jobs.sqlite"
    reg = Registry(path)
    for i in range(60):
        reg.add(_rec(str(i), name="x" * 400))
    with sqlite3.connect(path) as c:      # fold the WAL back so the damage hits the real pages
        c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    data = bytearray(path.read_bytes())
    assert len(data) > 8192
    data[4096:len(data) - 100] = b"\xff" * (len(data) - 4196)   # keep the header, wreck the pages
    path.write_bytes(bytes(data))
    with pytest.raises(WmlError) as e:
        Registry(path).list(limit=None)
    assert "is corrupted" in _one_line(e.value) or "not a wml job registry" in str(e.value)


def test_foreign_sqlite_file_is_not_a_registry(tmp_path):
    path = tmp_path / "jobs.sqlite"
    with sqlite3.connect(path) as c:
        c.execute("CREATE TABLE jobs (x)")
        c.execute("PRAGMA user_version = 1")
    with pytest.raises(WmlError) as e:
        Registry(path).list()
    assert "is not a wml job registry" in _one_line(e.value)


def test_newer_schema_is_refused(tmp_path):
    path = tmp_path / "jobs.sqlite"
    with sqlite3.connect(path) as c:
        c.execute("PRAGMA user_version = 99")
    with pytest.raises(WmlError, match="newer wml"):
        Registry(path).list()


LOCKER = textwrap.dedent("""
    import sqlite3, sys, time
    c = sqlite3.connect(sys.argv[1], isolation_level=None)
    c.execute("BEGIN EXCLUSIVE")
    print("locked", flush=True)
    time.sleep(float(sys.argv[2]))
    c.execute("ROLLBACK")
""")


def _hold_lock(path: Path, seconds: float) -> subprocess.Popen:
    p = subprocess.Popen([sys.executable, "-c", LOCKER, str(path), str(seconds)], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "locked"
    return p


def test_locked_file_is_a_clear_error_after_busy_timeout(tmp_path):
    path = tmp_path / "jobs.sqlite"
    Registry(path).add(_rec("1"))
    locker = _hold_lock(path, 10)
    try:
        reg = Registry(path, busy_timeout=0.5)
        t0 = time.monotonic()
        with pytest.raises(WmlError) as e:
            reg.add(_rec("2"))
        waited = time.monotonic() - t0
        assert 0.4 <= waited < 5, waited
        msg = _one_line(e.value)
        assert f"job registry {path} is locked by another process" in msg and "try again" in msg
    finally:
        locker.kill()
        locker.wait(timeout=10)
    # Nothing half-written, and the registry works again once the lock is gone.
    assert [r.job_id for r in Registry(path).list()] == ["1"]
    assert Registry(path).add(_rec("2")).id == 2


def test_short_lock_is_waited_out(tmp_path):
    path = tmp_path / "jobs.sqlite"
    Registry(path).add(_rec("1"))
    locker = _hold_lock(path, 0.7)
    try:
        assert Registry(path, busy_timeout=15).add(_rec("2")).id == 2
    finally:
        locker.wait(timeout=30)


def test_unwritable_place_is_a_clear_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(WmlError) as e:
        Registry(blocker / "sub" / "jobs.sqlite").list()
    assert "cannot create the job registry directory" in _one_line(e.value)
    (tmp_path / "dir.sqlite").mkdir()
    with pytest.raises(WmlError, match="is a directory"):
        Registry(tmp_path / "dir.sqlite").list()
