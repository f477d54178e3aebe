"""Overhead of the Horovod TensorFlow / Keras 3 layer over the native ddl_runtime.tensorflow calls.

Run on real ranks:  ddlrun -n 2 python benchmarks/horovod_tf_overhead.py [--rounds 7] [--calls 20]

Pairs, each measured as time per call, every method interleaved round by round (load on a
shared box hits all alike), median of the rounds:

* allreduce of one float32 tf.Tensor (1 KB and 4 MB), average, eager:
  ``ddl_runtime.tensorflow.allreduce(t, op="avg")`` vs ``hvd.allreduce(t, op=hvd.Average)``;
* the same 4 MB allreduce inside a ``tf.function``;
* allreduce against ``ddl_runtime.tensorflow.allreduce_n([t], op="avg")`` (1 KB and 4 MB, eager):
  ``hvd.allreduce(t, op=hvd.Average)`` and ``hvd.grouped_allreduce([t])``;
* a TF2 custom training step (``tf.function``: forward, tape, gradient exchange, SGD update) of
  the MLP below: ``ddl_runtime.tensorflow.DistributedGradientTape`` vs ``hvd.DistributedGradientTape``;
* a Keras 3 train step (``train_on_batch``, TensorFlow backend, SGD) of an MLP with ~1.1 M
  parameters in 6 tensors: ``ddl_runtime.keras.DistributedOptimizer`` vs
  ``horovod.tensorflow.keras.DistributedOptimizer``.

Rank 0 prints a table and, with ``--json FILE``, writes the figures.
"""
from __future__ import annotations

import argparse
import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import tensorflow as tf  # noqa: E402

import ddl_runtime.horovod.tensorflow.keras as hvd_keras  # noqa: E402
import ddl_runtime.horovod.tensorflow as hvd  # noqa: E402
import ddl_runtime.keras as native_keras  # noqa: E402
import ddl_runtime.tensorflow as native  # noqa: E402
import keras  # noqa: E402
from _tf_step import X, Y, mlp, tape_step  # noqa: E402
from _timing import report_pairs, select_pairs, time_interleaved  # noqa: E402


def _mlp(optimizer) -> keras.Model:
    model = mlp()
    model.compile(optimizer=optimizer, loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--calls", type=int, default=20, help="calls per method per round")
    p.add_argument("--json", dest="json_path")
    p.add_argument("--only", help="run only the pairs whose native row contains this text")
    a = p.parse_args(argv)
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    hvd.init()
    small, large = tf.ones([256]), tf.ones([1 << 20])
    x, y = X, Y
    m_native = _mlp(native_keras.DistributedOptimizer(keras.optimizers.SGD(1e-3)))
    m_hvd = _mlp(hvd_keras.DistributedOptimizer(keras.optimizers.SGD(1e-3)))

    @tf.function
    def native_traced(t):
        return native.allreduce(t, op="avg", name="large_traced")

    @tf.function
    def hvd_traced(t):
        return hvd.allreduce(t, op=hvd.Average, name="large_traced")

    methods = {
        "allreduce_n 1 KB: ddl_runtime.tensorflow.allreduce_n": lambda: native.allreduce_n([small], op="avg"),
        "allreduce_n 1 KB: hvd.allreduce": lambda: hvd.allreduce(small, op=hvd.Average, name="small_n"),
        "allreduce_n 1 KB: ddl_runtime.tensorflow.allreduce_n ": lambda: native.allreduce_n([small], op="avg"),
        "allreduce_n 1 KB: hvd.grouped_allreduce": lambda: hvd.grouped_allreduce([small], op=hvd.Average,
                                                                                  name="small_group"),
        "allreduce_n 4 MB: ddl_runtime.tensorflow.allreduce_n": lambda: native.allreduce_n([large], op="avg"),
        "allreduce_n 4 MB: hvd.allreduce": lambda: hvd.allreduce(large, op=hvd.Average, name="large_n"),
        "allreduce_n 4 MB: ddl_runtime.tensorflow.allreduce_n ": lambda: native.allreduce_n([large], op="avg"),
        "allreduce_n 4 MB: hvd.grouped_allreduce": lambda: hvd.grouped_allreduce([large], op=hvd.Average,
                                                                                  name="large_group"),
        "tape step: ddl_runtime.tensorflow.DistributedGradientTape": tape_step(native.DistributedGradientTape),
        "tape step: hvd.DistributedGradientTape": tape_step(hvd.DistributedGradientTape),
        "allreduce 1 KB: ddl_runtime.tensorflow.allreduce": lambda: native.allreduce(small, op="avg", name="small"),
        "allreduce 1 KB: hvd.allreduce": lambda: hvd.allreduce(small, op=hvd.Average, name="small"),
        "allreduce 4 MB: ddl_runtime.tensorflow.allreduce": lambda: native.allreduce(large, op="avg", name="large"),
        "allreduce 4 MB: hvd.allreduce": lambda: hvd.allreduce(large, op=hvd.Average, name="large"),
        "allreduce 4 MB in tf.function: ddl_runtime.tensorflow": lambda: native_traced(large),
        "allreduce 4 MB in tf.function: hvd.allreduce": lambda: hvd_traced(large),
        "Keras MLP train_on_batch: ddl_runtime.keras.DistributedOptimizer": lambda: m_native.train_on_batch(x, y),
        "Keras MLP train_on_batch: hvd.DistributedOptimizer": lambda: m_hvd.train_on_batch(x, y),
    }
    methods = select_pairs(methods, a.only)
    times = time_interleaved(methods, a.rounds, a.calls, hvd.barrier)
    if hvd.rank() == 0:
        report_pairs(times, hvd.size(), a.rounds, a.calls, a.json_path, name_width=66)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
