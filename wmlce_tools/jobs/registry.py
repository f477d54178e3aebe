"""The job registry: every job wml submitted, in one SQLite file.

Where: ``$WML_DATA_DIR/jobs.sqlite``, else ``<platformdirs user_data_dir("wml")>/jobs.sqlite``
(``~/.local/share/wml/jobs.sqlite`` on Linux).

Several ``wml`` processes may use it at once (two ``wml submit`` side by side, a ``wml submit
--wait`` polling while ``wml jobs`` lists): the file is in WAL mode (readers never wait for the
writer), every connection waits up to ``busy_timeout`` seconds for a lock, and every write is
one short ``BEGIN IMMEDIATE`` transaction.  A file that is corrupted, not a registry, locked
for too long or not writable gives one ``WmlError`` line saying what to do, never a traceback.

A job is found by its local id (the registry's own number, which ``wml jobs`` shows as ``@N``:
no scheduler writes an id that way) or by the scheduler's job id.  ``get`` (wml's own lookups,
which hold a scheduler's id) tries the scheduler's id first; ``resolve`` (what a user typed:
``wml status/logs/cancel JOB``) reads a job number one way: as the scheduler's id, the one submit
printed; ``@N`` (or ``id:N``) is the local id, and it also knows a run id or job directory name
(``wml-job-20261126-091855``).  ``job:X`` is the scheduler's id X too.
"""
from __future__ import annotations

import os
import sqlite3
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Union

from ..errors import WmlError
from ..schedulers.states import JobState

SCHEMA_VERSION = 1
DEFAULT_BUSY_TIMEOUT_S = 15.0

_COLUMNS = ("site", "scheduler", "job_id", "name", "job_dir", "script", "output", "error",
            "submit_command", "submitted_at", "state", "exit_code", "updated_at")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    site           TEXT NOT NULL,
    scheduler      TEXT NOT NULL,
    job_id         TEXT NOT NULL,
    name           TEXT NOT NULL DEFAULT '',
    job_dir        TEXT NOT NULL DEFAULT '',
    script         TEXT NOT NULL DEFAULT '',
    output         TEXT NOT NULL DEFAULT '',
    error          TEXT NOT NULL DEFAULT '',
    submit_command TEXT NOT NULL DEFAULT '',
    submitted_at   REAL NOT NULL,
    state          TEXT NOT NULL,
    exit_code      INTEGER,
    updated_at     REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS jobs_job_id ON jobs (job_id);
CREATE INDEX IF NOT EXISTS jobs_site ON jobs (site, id);
"""


@dataclass
class JobRecord:
    """One submitted job.  ``id`` is the registry's local id (None until added)."""

    site: str
    scheduler: str
    job_id: str                       # the scheduler's id (sbatch/bsub/qsub reply)
    name: str = ""
    job_dir: str = ""
    script: str = ""
    output: str = ""                  # output file, %j/%J already expanded
    error: str = ""
    submit_command: str = ""
    submitted_at: float = field(default_factory=time.time)   # seconds since the epoch, UTC
    state: JobState = JobState.PENDING
    exit_code: Optional[int] = None
    updated_at: Optional[float] = None
    id: Optional[int] = None

    def __post_init__(self) -> None:
        self.job_id = str(self.job_id)
        self.state = JobState.parse(self.state) if not isinstance(self.state, JobState) else self.state
        for name in ("job_dir", "script", "output", "error"):
            value = getattr(self, name)
            if isinstance(value, Path):
                setattr(self, name, str(value))

    def as_dict(self) -> Dict[str, Any]:
        """JSON-ready: the state as its name, times as epoch seconds."""
        d = asdict(self)
        d["state"] = self.state.value
        return d


Ref = Union[int, str, JobRecord]


def default_path(env=os.environ) -> Path:
    """``$WML_DATA_DIR/jobs.sqlite`` or the platform's user data dir for ``wml``."""
    override = env.get("WML_DATA_DIR")
    if override:
        return Path(override).expanduser().absolute() / "jobs.sqlite"
    from platformdirs import user_data_dir

    return Path(user_data_dir("wml", appauthor=False)) / "jobs.sqlite"


def local_id(text: str) -> Optional[int]:
    """N of ``@N`` or ``id:N`` (the ID column of ``wml jobs``), else None."""
    text = str(text).strip()
    for prefix in ("@", "id:", "ID:"):
        if text.startswith(prefix) and text[len(prefix):].strip().isdigit():
            return int(text[len(prefix):].strip())
    return None


def _when(t: Optional[float]) -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(t)) if t else "at an unknown time"


class Registry:
    """``Registry(path=None)``: the job registry at ``path`` (default :func:`default_path`).

    The file and its directory are created on first use.  Each call opens a connection, does
    one short transaction and closes it, so no lock outlives a call.
    """

    def __init__(self, path: Union[str, Path, None] = None, *,
                 busy_timeout: float = DEFAULT_BUSY_TIMEOUT_S) -> None:
        self.path = Path(path).expanduser().absolute() if path is not None else default_path()
        self.busy_timeout = float(busy_timeout)
        self._ready = False

    # -- connection and error translation ----------------------------------------------
    def _translate(self, e: sqlite3.Error) -> WmlError:
        msg = str(e) or type(e).__name__
        low = msg.lower()
        where = f"job registry {self.path}"
        if isinstance(e, sqlite3.OperationalError):
            if "locked" in low or "busy" in low:
                return WmlError(f"{where} is locked by another process (waited {self.busy_timeout:g} s): {msg}; "
                                f"try again when the other wml command has finished")
            if "unable to open" in low or "readonly" in low or "read-only" in low or "disk i/o" in low:
                return WmlError(f"cannot use {where}: {msg}; check that the file and its directory are "
                                f"writable, or set WML_DATA_DIR to another directory")
            if "no such table" in low or "no such column" in low or "has no column" in low:
                return WmlError(f"{where} is not a wml job registry ({msg}); move it aside "
                                f"(mv {self.path} {self.path}.bad) and wml starts a new one")
        return WmlError(f"{where} is corrupted: {msg}; move it aside (mv {self.path} {self.path}.bad) "
                        f"and wml starts a new one")

    def _connect(self) -> sqlite3.Connection:
        if self.path.is_dir():
            raise WmlError(f"job registry {self.path} is a directory; remove it or set WML_DATA_DIR")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise WmlError(f"cannot create the job registry directory {self.path.parent}: "
                           f"{e.strerror or e}; set WML_DATA_DIR to a writable directory") from None
        # isolation_level=None: no implicit transactions; we open each one explicitly.
        conn = sqlite3.connect(str(self.path), timeout=self.busy_timeout, isolation_level=None)
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")
            conn.row_factory = sqlite3.Row
            if not self._ready:
                self._init_with_retry(conn)
                self._ready = True
        except BaseException:
            conn.close()
            raise
        return conn

    def _init_with_retry(self, conn: sqlite3.Connection) -> None:
        """``_init``, retried while another process holds the file: SQLite answers "database
        is locked" at once, without its busy handler, when several processes switch a new
        file to WAL at the same moment (seen with three first uses at once)."""
        deadline = time.monotonic() + self.busy_timeout
        delay = 0.01
        while True:
            try:
                self._init(conn)
                return
            except sqlite3.OperationalError as e:
                if "locked" not in str(e).lower() or time.monotonic() + delay > deadline:
                    raise
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                time.sleep(delay)
                delay = min(delay * 2, 0.2)

    def _init(self, conn: sqlite3.Connection) -> None:
        # WAL lets readers go on while one process writes.  Where the file system cannot do
        # WAL (some network file systems) SQLite keeps its rollback journal: still correct.
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise WmlError(f"job registry {self.path} was written by a newer wml (schema {version}, "
                           f"this wml knows {SCHEMA_VERSION}); upgrade wml or set WML_DATA_DIR")
        if version == SCHEMA_VERSION:
            self._check_columns(conn)
            return
        conn.execute("BEGIN IMMEDIATE")
        try:
            if conn.execute("PRAGMA user_version").fetchone()[0] < SCHEMA_VERSION:
                for statement in _SCHEMA.split(";"):   # not executescript: it would COMMIT first
                    if statement.strip():
                        conn.execute(statement)
                conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        self._check_columns(conn)

    def _check_columns(self, conn: sqlite3.Connection) -> None:
        cols = {row[1] for row in conn.execute("PRAGMA table_info(jobs)")}
        missing = [c for c in ("id",) + _COLUMNS if c not in cols]
        if missing:
            raise sqlite3.OperationalError(f"no such column: {', '.join(missing)}")

    @contextmanager
    def _db(self, write: bool = False) -> Iterator[sqlite3.Connection]:
        """One connection, one transaction (IMMEDIATE for writes: the write lock is taken up
        front, so two writers queue on busy_timeout instead of deadlocking)."""
        conn = None
        try:
            conn = self._connect()
            conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            try:
                yield conn
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            else:
                conn.execute("COMMIT")
        except sqlite3.Error as e:
            raise self._translate(e) from None
        finally:
            if conn is not None:
                conn.close()

    # -- API ---------------------------------------------------------------------------
    @staticmethod
    def _record(row: sqlite3.Row) -> JobRecord:
        d = {k: row[k] for k in row.keys()}
        d["state"] = JobState.parse(d["state"])
        return JobRecord(**d)

    def add(self, record: JobRecord) -> JobRecord:
        """Store a new job; returns a copy carrying its local id."""
        now = time.time()
        rec = replace(record, id=None, updated_at=record.updated_at or now)
        values = [getattr(rec, c) for c in _COLUMNS]
        values[_COLUMNS.index("state")] = rec.state.value
        with self._db(write=True) as db:
            cur = db.execute(f"INSERT INTO jobs ({', '.join(_COLUMNS)}) VALUES ({', '.join('?' * len(_COLUMNS))})",
                             values)
            local_id = cur.lastrowid
        return replace(rec, id=local_id)

    def _find(self, db: sqlite3.Connection, ref: Ref, site: Optional[str]) -> Optional[sqlite3.Row]:
        site_sql, site_args = (" AND site = ?", [site]) if site else ("", [])
        if isinstance(ref, JobRecord):
            if ref.id is not None:
                return db.execute("SELECT * FROM jobs WHERE id = ?", (ref.id,)).fetchone()
            ref = ref.job_id
        if isinstance(ref, int):
            return db.execute(f"SELECT * FROM jobs WHERE id = ?{site_sql}", [ref, *site_args]).fetchone()
        text = str(ref).strip()
        if local_id(text) is not None:
            return db.execute(f"SELECT * FROM jobs WHERE id = ?{site_sql}", [local_id(text), *site_args]).fetchone()
        # The scheduler's id first (the newest such job: ids repeat after a cluster is reset) ...
        row = db.execute(f"SELECT * FROM jobs WHERE job_id = ?{site_sql} ORDER BY id DESC LIMIT 1",
                         [text, *site_args]).fetchone()
        if row is None and text.isdigit():
            # ... then the local id.
            row = db.execute(f"SELECT * FROM jobs WHERE id = ?{site_sql}", [int(text), *site_args]).fetchone()
        return row

    def resolve(self, text: str) -> "tuple[JobRecord, str]":
        """The job a user means by ``text``, and a note ('' when none) naming the other jobs
        that had the same scheduler id (the newest is taken; ``ambiguous`` lists them all).
        Forms: the scheduler's id as submit printed it (``job:X`` too), ``@N`` or ``id:N`` (the
        ID column of ``wml jobs``), a run id (a chain's first segment, from which its run is
        shown) or a job directory's name.  A bare number is never the ID column's."""
        text = str(text).strip()
        local = local_id(text)
        with self._db() as db:
            if local is not None:
                row = db.execute("SELECT * FROM jobs WHERE id = ?", (local,)).fetchone()
                if row is None:
                    raise self._unknown(text)
                return self._record(row), ""
            key = text[4:].strip() if text.lower().startswith("job:") and text[4:].strip() else text
            rows = db.execute("SELECT * FROM jobs WHERE job_id = ? ORDER BY id DESC", (key,)).fetchall()
            if not rows and key == text and "/" not in text:
                row = self._by_directory(db, text)
                rows = [row] if row is not None else []
            if not rows and text.isdigit():
                row = db.execute("SELECT * FROM jobs WHERE id = ?", (int(text),)).fetchone()
                if row is not None:
                    raise WmlError(f"no job with scheduler id {text} in the registry; `wml jobs` writes its own "
                                   f"IDs @N: @{text} is {row['site']} job {row['job_id']}")
        if not rows:
            raise self._unknown(text)
        note = ""
        if len(rows) > 1:
            others = ", ".join(f"{r['site']} job {r['job_id']} submitted {_when(r['submitted_at'])} (@{r['id']})"
                               for r in rows[1:])
            note = (f"{key} is the newest of {len(rows)} jobs with that id, {rows[0]['site']} (@{rows[0]['id']}); "
                    f"also {others}")
        return self._record(rows[0]), note

    def ambiguous(self, text: str) -> List[JobRecord]:
        """Every job ``text`` could mean (more than one: the same scheduler id on two sites,
        or again after a cluster was reset); [] for an @N."""
        text = str(text).strip()
        if local_id(text) is not None:
            return []
        key = text[4:].strip() if text.lower().startswith("job:") else text
        with self._db() as db:
            rows = db.execute("SELECT * FROM jobs WHERE job_id = ? ORDER BY id DESC", (key,)).fetchall()
        return [self._record(r) for r in rows] if len(rows) > 1 else []

    @staticmethod
    def _by_directory(db: sqlite3.Connection, name: str) -> Optional[sqlite3.Row]:
        """The job whose directory is ``name`` (a plain job's name-time), else the first
        segment of the run whose directory is ``name`` (a chained run's id)."""
        like = "%" + name.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        rows = db.execute("SELECT * FROM jobs WHERE job_dir LIKE ? ESCAPE '\\' ORDER BY id DESC",
                          (like,)).fetchall()
        own = [r for r in rows if Path(r["job_dir"]).name == name]
        if own:
            return own[0]
        segments = [r for r in rows if Path(r["job_dir"]).parent.name == name]
        return min(segments, key=lambda r: r["id"]) if segments else None

    @staticmethod
    def _unknown(ref: Ref) -> WmlError:
        shown = ref.job_id if isinstance(ref, JobRecord) else ref
        return WmlError(f"no job '{shown}' in the registry (see `wml jobs`)")

    def get(self, ref: Ref, *, site: Optional[str] = None) -> JobRecord:
        """The job with local id or scheduler id ``ref`` (``site`` narrows the search)."""
        with self._db() as db:
            row = self._find(db, ref, site)
        if row is None:
            raise self._unknown(ref)
        return self._record(row)

    def update_state(self, ref: Ref, state: Union[JobState, str], exit_code: Optional[int] = None, *,
                     site: Optional[str] = None) -> JobRecord:
        """Record the job's last known state (and its exit code when known); returns the
        updated record.  An exit code already recorded is kept when ``exit_code`` is None."""
        st = state if isinstance(state, JobState) else JobState.parse(state)
        now = time.time()
        with self._db(write=True) as db:
            row = self._find(db, ref, site)
            if row is None:
                raise self._unknown(ref)
            db.execute("UPDATE jobs SET state = ?, exit_code = COALESCE(?, exit_code), updated_at = ? WHERE id = ?",
                       (st.value, exit_code, now, row["id"]))
            row = db.execute("SELECT * FROM jobs WHERE id = ?", (row["id"],)).fetchone()
        return self._record(row)

    def list(self, limit: Optional[int] = 50, site: Optional[str] = None,
             states: Optional[List[Union[JobState, str]]] = None) -> List[JobRecord]:
        """Newest first; ``limit=None`` for all."""
        where, args = [], []
        if site:
            where.append("site = ?")
            args.append(site)
        if states:
            vals = [s.value if isinstance(s, JobState) else JobState.parse(s).value for s in states]
            where.append(f"state IN ({', '.join('?' * len(vals))})")
            args.extend(vals)
        sql = "SELECT * FROM jobs" + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY id DESC"
        if limit is not None:
            sql += " LIMIT ?"
            args.append(int(limit))
        with self._db() as db:
            rows = db.execute(sql, args).fetchall()
        return [self._record(r) for r in rows]
