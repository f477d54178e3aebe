"""Run one call of a function sent by ``wmlce_tools.api`` (on every rank of its trial):
``python -m wmlce_tools.api.remote CALL``.  Rank 0 writes ``(kind, value, traceback)`` with
cloudpickle to its trial's ``result.pkl`` (written whole, then renamed); an exception exits 1
after it is written (on any rank: ddlrun ends the others)."""
from __future__ import annotations

import os
import sys
import tempfile
import traceback
from pathlib import Path


def _rank() -> int:
    for var in ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID", "PALS_RANKID"):
        if os.environ.get(var, "").isdigit():
            return int(os.environ[var])
    return 0


def _write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def _named_from(fn, source: str) -> None:
    """cloudpickle sends a function's code as ``<dynamic-code>``: give it back the file it was
    written in, so a traceback names the script's lines (and its text, on a shared file system).
    The function, the code it nests, and its module's other such functions it may call."""
    import types

    def fix(code):
        if code.co_filename != "<dynamic-code>":
            return code
        consts = tuple(fix(c) if isinstance(c, types.CodeType) else c for c in code.co_consts)
        return code.replace(co_filename=source, co_consts=consts)

    seen = set()
    for f in [fn, *getattr(fn, "__globals__", {}).values()]:
        if isinstance(f, types.FunctionType) and id(f) not in seen:
            seen.add(id(f))
            f.__code__ = fix(f.__code__)


def main() -> int:
    import cloudpickle

    run_dir = Path(os.environ["WML_SWEEP_RUN"])
    call = int(sys.argv[1])
    trial = int(os.environ["WML_TRIAL"])
    fn, calls, *rest = cloudpickle.loads((run_dir / "calls.pkl").read_bytes())
    if rest and rest[0]:
        _named_from(fn, rest[0])
    args, kwargs = calls[call]
    out = run_dir / "trials" / str(trial) / ("result.pkl" if _rank() == 0 else f"result-rank{_rank()}.pkl")
    try:
        value = fn(*args, **kwargs)
    except BaseException as e:   # noqa: BLE001 - everything goes back to the caller
        tb = traceback.format_exc()
        try:
            blob = cloudpickle.dumps(("error", e, tb))
        except Exception:
            blob = cloudpickle.dumps(("error", f"{type(e).__name__}: {e}", tb))
        _write(out, blob)
        sys.stderr.write(tb)
        return 1
    if _rank() == 0:
        try:
            blob = cloudpickle.dumps(("ok", value, ""))
        except Exception as e:
            blob = cloudpickle.dumps(("error", f"its return value does not pickle ({type(e).__name__}: {e})", ""))
            _write(out, blob)
            return 1
        _write(out, blob)
    return 0


if __name__ == "__main__":
    sys.exit(main())
