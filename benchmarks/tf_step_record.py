"""What counting a step costs where Keras / TensorFlow run Python every step (issue 51's gap): the
wrapper around a gradient reduction's body (frameworks/tensorflow.py `timed_gradient_step`: the
bytes counted once, RunStats.reduced -> end_step; the collectives inside count their own time,
benchmarks/stats_overhead.py) against the bare body, on a
no-op body of 161 float32 arrays (ResNet-50's gradient count), in alternating blocks of one run.

    python benchmarks/tf_step_record.py [--blocks 21] [--calls 20000]

Prints the median cost per call of each and the difference (what a step pays).  One process,
no MPI: the wrapper's cost does not depend on the reduction it wraps.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from ddl_runtime.core import stats as core_stats  # noqa: E402
from ddl_runtime.core.stats import RunStats  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--blocks", type=int, default=21)
    p.add_argument("--calls", type=int, default=20000)
    a = p.parse_args()
    from ddl_runtime.frameworks import tensorflow as ddl_tf   # imports TensorFlow
    from ddl_runtime.state import runtime

    arrays = [np.zeros(64, np.float32) for _ in range(161)]
    bare = lambda xs: xs   # noqa: E731

    class _Rt:
        stats = RunStats(0, 1, None)

    runtime.current = lambda: _Rt       # the wrapper asks the runtime for its record: no MPI here
    with core_stats.gradient_reduction():
        timed = ddl_tf.timed_gradient_step(bare)
    old, new = [], []
    for _ in range(a.blocks):
        old.append(timeit.timeit(lambda: bare(arrays), number=a.calls) / a.calls)
        new.append(timeit.timeit(lambda: timed(arrays), number=a.calls) / a.calls)
    o, n = statistics.median(old), statistics.median(new)
    print(f"bare body {o * 1e6:.3f} us/call, with the step record {n * 1e6:.3f} us/call: "
          f"+{(n - o) * 1e6:.3f} us a step ({_Rt.stats.steps} steps recorded)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
