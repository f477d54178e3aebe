"""Run under `ddlrun -n 2` with $WML_CHECKPOINT_DIR and WML_STOP_SIGNAL=USR1: a training run
stopped by the walltime's signal and resumed, against the same run done in one go.

    walltime_resume.py keras|tfloop first  OUT   # the uninterrupted reference, then the run that
                                                 # rank 1 alone signals mid-epoch: exits 75
    walltime_resume.py keras|tfloop resume OUT   # resumes and finishes; then a corrupt checkpoint

keras: model.fit with ddl.DDLCallback, ddl.WalltimeCheckpoint, ddl.DDLGlobalVariablesCallback on
KERAS_BACKEND (shuffle=True on torch: the order comes from each rank's torch stream; on TensorFlow
the data is ordered by hand, shuffle=False).  tfloop: a tf.GradientTape loop with
ddl_runtime.tensorflow.Checkpointer, the batch derived from the step.  Both use dropout (Keras seed
generators) and per-rank seeds, so each rank's random streams must come back as they were.
Each rank writes OUT/<what>.rank<R>.npz and prints `CASE corrupt: <error>`; the test judges.
"""
import json
import os
import signal
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

import keras  # noqa: E402
from keras import layers  # noqa: E402

import ddl  # noqa: E402  (the WML CE compatibility module)
from ddl_runtime import checkpoint  # noqa: E402

mode, phase, out = sys.argv[1], sys.argv[2], sys.argv[3]
rank, size = ddl.rank(), ddl.size()
PER_RANK, BATCH, EPOCHS = 96, 16, 3  # 6 batches an epoch, 18 in all
STOP_AT = 8  # rank 1 gets the signal after the 9th batch: epoch 1, batch 2


def data():
    r = np.random.RandomState(0)
    x = r.rand(PER_RANK * size, 6).astype("float32")
    y = keras.utils.to_categorical(r.randint(0, 3, size=len(x)), 3)
    return x[rank::size], y[rank::size]


def build(name):
    keras.utils.set_random_seed(100 + rank)  # every rank its own start and streams
    model = keras.Sequential([keras.Input(shape=(6,)), layers.Dense(16, activation="tanh", name="hidden"),
                              layers.Dropout(0.3), layers.Dense(3, activation="softmax", name="out")], name=name)
    return model, keras.optimizers.Adam(0.01, name="adam")


def save(what, model):
    np.savez(os.path.join(out, f"{what}.rank{rank}.npz"),
             *[keras.ops.convert_to_numpy(w) for w in model.weights])


class Signal(keras.callbacks.Callback):
    """The scheduler's warning, reaching rank 1 only."""
    def __init__(self):
        super().__init__()
        self.seen = 0

    def on_train_batch_end(self, batch, logs=None):
        if rank == 1 and self.seen == STOP_AT:
            os.kill(os.getpid(), signal.SIGUSR1)
        self.seen += 1


def fit(name, walltime, *extra):
    x, y = data()
    model, opt = build(name)
    model.compile(optimizer=opt, loss="categorical_crossentropy")
    callbacks = [*extra, ddl.DDLCallback(), *([ddl.WalltimeCheckpoint()] if walltime else []),
                 ddl.DDLGlobalVariablesCallback()]
    shuffle = keras.backend.backend() == "torch"
    model.fit(x, y, batch_size=BATCH, epochs=EPOCHS, shuffle=shuffle, verbose=0, callbacks=callbacks)
    return model


def loop(name, walltime, stop_at=None):
    import tensorflow as tf

    import ddl_runtime.tensorflow as ddl_tf

    x, y = data()
    model, opt = build(name)
    noise = tf.random.Generator.from_seed(7 + rank)
    per_epoch = PER_RANK // BATCH
    ckpt = ddl_tf.Checkpointer(model, opt, steps=per_epoch * EPOCHS, noise=noise) if walltime else None
    start = ckpt.restore() if ckpt else 0
    ddl_tf.broadcast_variables(model.weights, root_rank=0)
    loss_fn = keras.losses.CategoricalCrossentropy()

    @tf.function
    def step(xb, yb):
        with tf.GradientTape() as tape:
            xb = xb + noise.normal(tf.shape(xb), stddev=0.01)
            loss = loss_fn(yb, model(xb, training=True))
        grads = ddl_tf.DistributedGradientTape(tape).gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))

    for s in range(start, per_epoch * EPOCHS):
        order = np.random.RandomState(1000 * rank + s // per_epoch).permutation(PER_RANK)  # fixed per epoch
        rows = order[(s % per_epoch) * BATCH:(s % per_epoch + 1) * BATCH]
        step(x[rows], y[rows])
        if rank == 1 and s == stop_at:
            os.kill(os.getpid(), signal.SIGUSR1)
        if ckpt:
            ckpt.step_end(s)
    return model


def run(name, walltime, stop=False):
    if mode == "keras":
        return fit(name, walltime, *([Signal()] if stop else []))
    return loop(name, walltime, STOP_AT if stop else None)


if phase == "first":
    save("reference", run("reference", walltime=False))
    run("net", walltime=True, stop=True)
    print(f"rank {rank}: AFTER THE STOPPED RUN", flush=True)  # must never print: the run exits 75
    sys.exit(0)

save("final", run("net", walltime=True))
ddl.barrier()
if rank == 0:  # damage the checkpoint the run resumed from
    latest = json.loads((checkpoint.directory() / "latest.json").read_text())
    payload = checkpoint.directory() / latest["path"]
    raw = bytearray(payload.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    payload.write_bytes(bytes(raw))
ddl.barrier()
try:
    run("net", walltime=True)
    print(f"CASE corrupt: (no error) rank {rank}", flush=True)
except Exception as exc:  # noqa: BLE001 - the test judges the message
    print(f"CASE corrupt: {type(exc).__name__}: {exc}", flush=True)
