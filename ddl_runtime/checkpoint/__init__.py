"""Training that outlives one job: the stop agreement, atomic checkpoints, resume (see protocol.py).

    from ddl_runtime import checkpoint
    restored = checkpoint.load()                  # collective; None on the first segment
    start = 0 if restored is None else restored.step + 1
    for step in range(start, steps):
        ...train one step...
        if checkpoint.agree(step):                # True on every rank iff any rank got the signal
            checkpoint.save(state, step)          # rank 0 writes atomically; RNG streams included
            checkpoint.exit_resume()              # exit status 75: resume in the next job

Nothing here imports torch, TensorFlow or wmlce_tools; torch's glue is ddl_runtime.checkpoint.torch.
Saving and loading (numpy) load on first use: the job side (``wml``, ddlrun, the chain's step)
imports this package for protocol.py's names alone.
"""
from .protocol import EXIT_RESUME
from .stop import agree, install as _install, request, requested

#: the names saving.py and store.py give, loaded when first asked for
_LAZY = {"Restored": "saving", "configure": "saving", "directory": "saving", "exit_resume": "saving",
         "load": "saving", "save": "saving", "CheckpointError": "store"}

__all__ = ["EXIT_RESUME", "CheckpointError", "Restored", "agree", "configure", "directory", "exit_resume", "load",
           "request", "requested", "save"]

_install()  # the stop signal's handler, when $WML_STOP_SIGNAL names one


def __getattr__(name):
    if name in _LAZY:
        from . import saving, store

        value = getattr(saving if _LAZY[name] == "saving" else store, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
