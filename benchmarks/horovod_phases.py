"""Where a Horovod-layer ``hvd.allreduce`` spends its time, next to the native call (issue 25 item 4).

Run on real ranks:  ddlrun -n 2 python benchmarks/horovod_phases.py [--calls 400] [--repeats 3] [--tape | --torch]

For one float32 tensor of each size (1 KB and 4 MB; tf.Tensor, or torch with ``--torch``), rank 0
prints the time per call of the native ``allreduce_n([t], op="avg")`` (``ddl_runtime.tensorflow``
or ``ddl_runtime``) and of ``hvd.allreduce(t, op=hvd.Average)``, named and unnamed, and inside
each the time spent in the negotiation's phases and in the reduction:

* ``submit``: the controller's submit (it may start the round and finish it when the peer is
  there already); ``start_round`` / ``advance_round``: building this rank's slot, and testing and
  reading the round (both include waiting for the peer);
* ``negotiated``: the shared-memory allreduce of the negotiated op (collectives/negotiated.py);
  ``results``: its reduction into the shared result regions (shm/results.py), which the native
  call also runs; ``announce_cached`` / ``reduce_carried``: a repeat whose data rode in the
  round, reduced from the round's rows;
* ``core``: with ``--torch``, horovod.torch's submit of the request (checks, host views, submit).

``--tape`` measures instead the TF2 custom step of horovod_tf_overhead.py (a ``tf.function``:
forward, tape, exchange of the 1.1 M-parameter MLP's 6 gradients, SGD), with
``ddl_runtime.tensorflow.DistributedGradientTape`` and ``hvd.DistributedGradientTape``; ``core``
is then the Python each runs inside its ``tf.numpy_function`` (native: ``allreduce_n_fresh``;
Horovod: submit and wait), and ``run_ready`` the table's check of the group.

Timers wrap those methods (a few microseconds each), so read the phases against each other and
the totals as slightly high.
"""
from __future__ import annotations

import argparse
import os
import time
from typing import Callable, Dict, Tuple

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import ddl_runtime as ddl  # noqa: E402
from ddl_runtime.collectives import negotiation  # noqa: E402
from ddl_runtime.collectives import negotiated
from ddl_runtime.transports.shm import results  # noqa: E402

PHASES = [(negotiation.Controller, "_submit", "submit"), (negotiation.Controller, "_start_round", "start_round"),
          (negotiation.Controller, "_advance_round", "advance_round"),
          (negotiation.Controller, "_run_ready", "run_ready"),
          (negotiation.Controller, "_announce_cached", "announce_cached"),
          (negotiated.NegotiatedShm, "reduce_carried", "reduce_carried"),
          (negotiated.NegotiatedShm, "allreduce", "negotiated"), (results.SharedResults, "allreduce", "results")]
_spent: Dict[str, float] = {}


def _timed(fn: Callable, label: str) -> Callable:
    def wrapper(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            _spent[label] = _spent.get(label, 0.0) + time.perf_counter() - t0
    return wrapper


def _measure(call: Callable[[], object], calls: int) -> Tuple[float, Dict[str, float]]:
    for _ in range(50):
        call()
    _spent.clear()
    t0 = time.perf_counter()
    for _ in range(calls):
        call()
    total = time.perf_counter() - t0
    return total / calls * 1e6, {k: v / calls * 1e6 for k, v in _spent.items()}


def _tf_cases(tape: bool) -> Tuple[object, Dict[str, Dict[str, Callable[[], object]]]]:
    import tensorflow as tf

    import ddl_runtime.horovod.tensorflow as hvd
    import ddl_runtime.tensorflow as native
    from ddl_runtime.horovod.tensorflow import mpi_ops
    from _tf_step import tape_step

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    PHASES.extend([(ddl, "allreduce_n_fresh", "core"), (mpi_ops, "_run", "core")])
    if tape:
        return hvd, {"tape step": {"native DistributedGradientTape": tape_step(native.DistributedGradientTape),
                                   "hvd.DistributedGradientTape": tape_step(hvd.DistributedGradientTape)}}
    cases = {}
    for label, n in (("1 KB", 256), ("4 MB", 1 << 20)):
        t = tf.ones([n])
        cases[label] = {"native allreduce_n": lambda t=t: native.allreduce_n([t], op="avg"),
                        "hvd.allreduce, named": lambda t=t, n=n: hvd.allreduce(t, op=hvd.Average, name=f"phases_{n}"),
                        "hvd.allreduce, unnamed": lambda t=t: hvd.allreduce(t, op=hvd.Average)}
    return hvd, cases


def _torch_cases() -> Tuple[object, Dict[str, Dict[str, Callable[[], object]]]]:
    import torch

    import ddl_runtime.horovod.torch as hvd
    from ddl_runtime.horovod.torch import mpi_ops

    torch.set_num_threads(1)
    PHASES.append((mpi_ops, "_allreduce_start", "core"))
    cases = {}
    for label, n in (("1 KB", 256), ("4 MB", 1 << 20)):
        t = torch.ones(n)
        cases[label] = {"native allreduce_n": lambda t=t: ddl.allreduce_n([t], op="avg", names=["t"]),
                        "hvd.allreduce, named": lambda t=t, n=n: hvd.allreduce(t, op=hvd.Average, name=f"phases_{n}"),
                        "hvd.allreduce, unnamed": lambda t=t: hvd.allreduce(t, op=hvd.Average)}
    return hvd, cases


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=400, help="calls per method per repeat")
    p.add_argument("--repeats", type=int, default=3)
    which = p.add_mutually_exclusive_group()
    which.add_argument("--tape", action="store_true", help="the TF DistributedGradientTape step instead of one tensor")
    which.add_argument("--torch", action="store_true", help="horovod.torch and torch tensors instead of TensorFlow")
    a = p.parse_args(argv)
    hvd, cases = _torch_cases() if a.torch else _tf_cases(a.tape)
    hvd.init()
    for cls, name, label in PHASES:
        setattr(cls, name, _timed(getattr(cls, name), label))
    for label, methods in cases.items():
        for _ in range(a.repeats):
            for method, call in methods.items():
                hvd.barrier()
                per_call, phases = _measure(call, a.calls)
                if hvd.rank() == 0:
                    shown = ", ".join(f"{k} {v:.1f}" for k, v in phases.items())
                    print(f"{label} {method:<30} {per_call:8.1f} us/call   {shown}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
