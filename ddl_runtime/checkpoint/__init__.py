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
"""
from .protocol import EXIT_RESUME
from .saving import Restored, configure, directory, exit_resume, load, save
from .stop import agree, install as _install, request, requested
from .store import CheckpointError

__all__ = ["EXIT_RESUME", "CheckpointError", "Restored", "agree", "configure", "directory", "exit_resume", "load",
           "request", "requested", "save"]

_install()  # the stop signal's handler, when $WML_STOP_SIGNAL names one
