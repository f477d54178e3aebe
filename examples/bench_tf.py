#!/usr/bin/env python
"""TensorFlow benchmarks for ddl_runtime (figures in BENCHMARKS.md, "TensorFlow").

    ddlrun -n 2 python examples/bench_tf.py allreduce [--repeats 15]
        allreduce_n (op avg) of ResNet-50's 161 gradient tensors (25.6 M float32 values):
        the numpy path (ddl_runtime.allreduce_n on arrays, in place), ddl_runtime.tensorflow
        eagerly (out of place: reads the tensors; on one host the results live in shared
        memory that the peers write, wrapped through DLPack) and inside tf.function (tf.numpy_function; the gradients are made and
        consumed inside the function, as in a Keras train step), interleaved in the same job.
        Also: numpy-into (the engine out of place into private memory the caller gives),
        numpy-fresh (allreduce_n_fresh: out of place into memory the runtime picks, what the
        TF path runs on: its floor), and a
        tf.function taking and returning the 161 tensors (tf-function-args) beside the same
        function minus the collective (tf-args-only: TensorFlow's own argument handling).
        Per mode: the median over repeats of the slowest rank's time per call; ratio = mode /
        numpy path.

    python examples/bench_tf.py scaling [--batch-sizes 32,128] [--steps 120] [--repeats 3]
        tf_cnn_benchmarks style: images/s of model.fit (Keras 3 on TensorFlow, the digits CNN
        of examples/tf_keras_digits.py, synthetic 8x8 images) on 1 rank, on 2 ranks with the
        DDL callbacks (gradients averaged every step), and on the same 2 ranks training
        independently (no communication: what the box gives two processes).  1-rank and
        2-rank jobs alternate; medians are reported.
            scaling efficiency    = 2-rank images/s / (2 x 1-rank images/s)
            vs independent ranks  = 2-rank images/s / 2-independent-ranks images/s
        (also as the median of the per-job ratio: both phases of one job see the same load)
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")


def _slowest(seconds: float) -> float:
    import numpy as np

    import ddl_runtime

    return float(ddl_runtime.allreduce(np.array([seconds]), op="max")[0])


def bench_allreduce(args: argparse.Namespace) -> int:
    import numpy as np
    import tensorflow as tf

    import ddl_runtime
    import ddl_runtime.tensorflow as dtf
    from ddl_runtime.resnet50 import resnet50_shapes

    dtf.init()
    shapes = resnet50_shapes()
    names = [n for n, _ in shapes]
    rng = np.random.RandomState(0)
    arrays = [rng.rand(*s).astype(np.float32) for _, s in shapes]
    tensors = [tf.constant(a) for a in arrays]
    outputs = [np.empty_like(a) for a in arrays]

    # As in a Keras train step, the gradients are made inside the traced function (here: the
    # captured tensors) and the results are consumed there; only a scalar leaves it.  Passing
    # 161 tensors in and out of a tf.function costs ~6 ms of TensorFlow's own argument
    # handling on this box (shown as "tf-function-args", with "tf-args-only": the same
    # function without the collective, i.e. TensorFlow's share of that line).
    @tf.function
    def graph():
        return dtf.allreduce_n(tensors, op="avg", names=names)[-1][0]

    graph_args = tf.function(lambda ts: dtf.allreduce_n(ts, op="avg", names=names))
    args_only = tf.function(lambda ts: [tf.identity(t) for t in ts])

    def numpy_path():
        ddl_runtime.allreduce_n(arrays, op="avg", names=names)

    def numpy_into():
        ddl_runtime.allreduce_n_into(arrays, outputs, op="avg", names=names)

    def numpy_fresh():
        ddl_runtime.allreduce_n_fresh(arrays, op="avg", names=names)

    def tf_eager():
        out = dtf.allreduce_n(tensors, op="avg", names=names)
        out[-1].numpy()  # results are materialised tensors already; touch one

    def tf_graph():
        graph().numpy()

    def tf_graph_args():
        graph_args(tensors)[-1].numpy()

    def tf_args_only():
        args_only(tensors)[-1].numpy()

    modes = {"numpy": numpy_path, "numpy-into": numpy_into, "numpy-fresh": numpy_fresh, "tf-eager": tf_eager, "tf-function": tf_graph,
             "tf-function-args": tf_graph_args, "tf-args-only": tf_args_only}
    for fn in modes.values():  # warm-up: plans, signatures, tracing
        fn()
        fn()
    times = {m: [] for m in modes}
    order = list(modes)
    for rep in range(args.repeats):
        for m in order[rep % len(order):] + order[:rep % len(order)]:  # rotate so no mode always runs first
            ddl_runtime.barrier()
            t0 = time.perf_counter()
            modes[m]()
            times[m].append(_slowest(time.perf_counter() - t0))
    if dtf.rank() == 0:
        med = {m: statistics.median(v) for m, v in times.items()}
        values = sum(a.size for a in arrays)
        print(f"allreduce_n op=avg of ResNet-50's gradients: {len(arrays)} tensors, {values:,} float32 values "
              f"({values * 4 / 2**20:.1f} MiB), {dtf.size()} ranks, {args.repeats} repeats; median of the slowest rank")
        for m, v in med.items():
            print(f"  {m:12s} {v * 1e3:8.1f} ms   x{v / med['numpy']:.2f} of numpy   "
                  f"(min {min(times[m]) * 1e3:.1f}, max {max(times[m]) * 1e3:.1f})")
        if args.json:
            with open(args.json, "w") as fh:
                json.dump({"median_s": med, "times_s": times}, fh, indent=1)
    return 0


def _model():
    import keras
    from keras import layers

    model = keras.Sequential([
        keras.Input(shape=(8, 8, 1)),
        layers.Conv2D(32, (3, 3), activation="relu"),
        layers.Conv2D(64, (3, 3), activation="relu"),
        layers.MaxPooling2D((2, 2)),
        layers.Dropout(0.25),
        layers.Flatten(),
        layers.Dense(128, activation="relu"),
        layers.Dropout(0.5),
        layers.Dense(10, activation="softmax"),
    ])
    model.compile(loss="categorical_crossentropy", optimizer=keras.optimizers.Adadelta(learning_rate=1.0))
    return model


def scaling_worker(args: argparse.Namespace) -> int:
    import numpy as np
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    import keras

    import ddl
    import ddl_runtime

    rank, size = ddl.rank(), ddl.size()
    result = {}
    for b in [int(x) for x in args.batch_sizes.split(",")]:
        n = b * args.steps
        rng = np.random.RandomState(rank)
        x = rng.rand(n, 8, 8, 1).astype("float32")
        y = keras.utils.to_categorical(rng.randint(0, 10, n), 10)
        # Untimed first: a plain fit over the whole data, so that every timed phase finds the process
        # equally warm (kernels, allocator, data adapter), whichever phase comes first.
        _model().fit(x, y, batch_size=b, epochs=1, verbose=0, shuffle=False)
        ddl_runtime.barrier()
        variants = {"ddl": [ddl.DDLCallback(), ddl.DDLGlobalVariablesCallback()]} if size > 1 else {"single": []}
        if size > 1:
            variants["independent"] = []
            if args.rep % 2:  # alternate which 2-rank phase goes first
                variants = dict(reversed(list(variants.items())))
        for name, callbacks in variants.items():
            model = _model()
            model.fit(x[:4 * b], y[:4 * b], batch_size=b, epochs=1, verbose=0, callbacks=callbacks)  # trace, warm up
            ddl_runtime.barrier()
            t0 = time.perf_counter()
            model.fit(x, y, batch_size=b, epochs=1, verbose=0, shuffle=False, callbacks=callbacks)
            mine = time.perf_counter() - t0
            ddl_runtime.barrier()
            # images/s of the job: every rank's own rate, summed (ranks run at their own pace when independent)
            rate = float(ddl_runtime.allreduce(np.array([n / mine]), op="sum")[0])
            result[f"{name}@{b}"] = rate
    if rank == 0:
        print("RESULT " + json.dumps(result), flush=True)
    return 0


def bench_scaling(args: argparse.Namespace) -> int:
    runs = {1: [], 2: []}
    for rep in range(args.repeats):
        for ranks in ((1, 2) if rep % 2 == 0 else (2, 1)):
            cmd = ["mpiexec", "-n", str(ranks), sys.executable, os.path.abspath(__file__), "_scaling-worker",
                   "--batch-sizes", args.batch_sizes, "--steps", str(args.steps), "--rep", str(rep)]
            env = dict(os.environ, OMP_NUM_THREADS="1")
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
            line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
            if proc.returncode != 0 or line is None:
                print(f"bench_tf: {ranks}-rank job failed (exit {proc.returncode}): {proc.stderr.strip()[-500:]}",
                      file=sys.stderr)
                return 1
            runs[ranks].append(json.loads(line[len("RESULT "):]))
            print(f"  repeat {rep + 1}, {ranks} rank(s): {runs[ranks][-1]}", flush=True)
    print(f"Keras 3 / TensorFlow digits CNN, model.fit, {args.steps} steps per measurement, "
          f"{args.repeats} repeats, medians (images/s):")
    out = {}
    for b in [int(x) for x in args.batch_sizes.split(",")]:
        one = statistics.median(r[f"single@{b}"] for r in runs[1])
        two = statistics.median(r[f"ddl@{b}"] for r in runs[2])
        ind = statistics.median(r[f"independent@{b}"] for r in runs[2])
        # the two 2-rank phases of one job saw the same background load: their ratio is the steadier figure
        paired = statistics.median(r[f"ddl@{b}"] / r[f"independent@{b}"] for r in runs[2])
        out[b] = {"1 rank": one, "2 ranks ddl": two, "2 independent": ind, "ddl/independent same job": paired}
        print(f"  batch {b:4d}/rank: 1 rank {one:8.0f}   2 ranks {two:8.0f}   2 independent {ind:8.0f}   "
              f"efficiency {two / (2 * one):.2f}   vs independent {two / ind:.2f} "
              f"(same-job pairs: {paired:.2f})")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"medians": out, "runs": runs}, fh, indent=1)
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    sub = p.add_subparsers(dest="what", required=True)
    a = sub.add_parser("allreduce", help="TF path vs numpy path (run under ddlrun -n 2)")
    a.add_argument("--repeats", type=int, default=15)
    a.add_argument("--json")
    s = sub.add_parser("scaling", help="images/s: 1 rank vs 2 ranks vs 2 independent ranks")
    w = sub.add_parser("_scaling-worker")
    w.add_argument("--rep", type=int, default=0)
    for q in (s, w):
        q.add_argument("--batch-sizes", default="32,128")
        q.add_argument("--steps", type=int, default=120)
    s.add_argument("--repeats", type=int, default=3)
    s.add_argument("--json")
    args = p.parse_args(argv)
    if args.what == "allreduce":
        return bench_allreduce(args)
    if args.what == "scaling":
        return bench_scaling(args)
    return scaling_worker(args)


if __name__ == "__main__":
    sys.exit(main())
