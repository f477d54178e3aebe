"""A Horovod Keras script (``import horovod.keras as hvd``, run with ddlrun --horovod) with the
runtime's WalltimeCheckpoint(every=args.every), and a node lost on cue, for the self-healing tests.

    python heal_keras.py OUT [--kill-at B --node K]

--kill-at B: in the first attempt ($WML_ATTEMPT 1), every rank of layout node K (GROUP_RANK)
SIGKILLs itself before training batch B of the run (counted from 0).  Data order fixed per epoch
(shuffle=False), dropout and per-rank seeds, SGD with momentum.  Rank 0 writes OUT/final.npz (the
weights) at the end.
"""
import argparse
import io
import os
import signal
from pathlib import Path

import numpy as np

import keras
from keras import layers

from ddl_runtime.checkpoint.keras import WalltimeCheckpoint

p = argparse.ArgumentParser()
p.add_argument("out")
p.add_argument("--kill-at", type=int)
p.add_argument("--node", type=int, default=1)
p.add_argument("--api", choices=("horovod", "ddl"), default="horovod")
p.add_argument("--every", type=int, default=4)
args = p.parse_args()
out = Path(args.out)
if args.api == "horovod":
    import horovod.keras as hvd

    hvd.init()
    rank, size = hvd.rank(), hvd.size()
else:
    import ddl

    rank, size = ddl.rank(), ddl.size()
attempt = int(os.environ.get("WML_ATTEMPT", "1"))
node = int(os.environ.get("GROUP_RANK", "0"))
PER_RANK, BATCH, EPOCHS = 64, 8, 3          # 8 batches an epoch, 24 in all


def data():
    r = np.random.RandomState(0)
    x = r.rand(PER_RANK * size, 6).astype("float32")
    y = keras.utils.to_categorical(r.randint(0, 3, size=len(x)), 3)
    return x[rank::size], y[rank::size]


class Kill(keras.callbacks.Callback):
    """A node lost before batch B of the run (the first attempt only)."""

    def __init__(self, at):
        super().__init__()
        self.at, self.seen = at, 0

    def on_train_batch_begin(self, batch, logs=None):
        if self.seen == self.at and attempt == 1 and node == args.node:
            os.kill(os.getpid(), signal.SIGKILL)
        self.seen += 1


def fit():
    keras.utils.set_random_seed(100 + rank)
    model = keras.Sequential([keras.Input(shape=(6,)), layers.Dense(16, activation="tanh"), layers.Dropout(0.3),
                              layers.Dense(3, activation="softmax")])
    opt = keras.optimizers.SGD(0.05, momentum=0.9)
    if args.api == "horovod":
        model.compile(optimizer=hvd.DistributedOptimizer(opt), loss="categorical_crossentropy")
        callbacks = [Kill(args.kill_at), hvd.callbacks.BroadcastGlobalVariablesCallback(0), WalltimeCheckpoint(every=args.every)]
    else:
        model.compile(optimizer=opt, loss="categorical_crossentropy")
        callbacks = [Kill(args.kill_at), ddl.DDLCallback(), WalltimeCheckpoint(every=args.every), ddl.DDLGlobalVariablesCallback()]
    x, y = data()
    model.fit(x, y, batch_size=BATCH, epochs=EPOCHS, shuffle=False, verbose=0, callbacks=callbacks)
    return model


def save(model, name):
    if rank == 0:
        buf = io.BytesIO()
        np.savez(buf, *[keras.ops.convert_to_numpy(w) for w in model.weights])
        (out / name).write_bytes(buf.getvalue())


save(fit(), "final.npz")
