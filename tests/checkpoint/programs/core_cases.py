"""ddl_runtime.checkpoint's collectives on a bad input or a fault (tests only; numpy, no torch).

    python core_cases.py CASE DIR RESULTS

Every rank writes RESULTS/rank<r>: `ERROR <rank> <type>: <message>` for the DDLError it got, or
`OK <rank> <detail>`.
"""
import sys
from pathlib import Path

import numpy as np

import ddl_runtime as ddl
from ddl_runtime import checkpoint


def main() -> None:
    case, base, results = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
    ddl.init()
    r = ddl.rank()
    checkpoint.configure(directory=base / f"rank{r}" if case == "unshared" else base)
    try:
        if case == "save":  # three saves: the last two are kept
            for step in (1, 2, 3):
                checkpoint.save({"w": np.full(4, float(step))}, step)
            detail = "saved"
        elif case == "load":
            restored = checkpoint.load()
            detail = "none" if restored is None else f"{restored.step} {restored.state['w'].tolist()}"
        elif case == "unshared":
            if r == 0:
                (base / "rank0").mkdir(parents=True, exist_ok=True)
                (base / "rank0" / "latest.json").write_text('{"step": 3}')
            ddl.barrier()
            checkpoint.load()
            detail = "loaded"
        elif case == "save-steps":
            checkpoint.save({"w": np.zeros(2)}, 5 + r)
            detail = "saved"
        elif case == "agree-steps":
            detail = str(checkpoint.agree(7 + r))
        else:
            raise SystemExit(f"unknown case {case}")
        line = f"OK {r} {detail}"
    except ddl.DDLError as exc:
        line = f"ERROR {r} {type(exc).__name__}: {exc}"
    (results / f"rank{r}").write_text(line)


if __name__ == "__main__":
    main()
