"""Run on 2 ranks under `ddlrun --horovod`: hvd.elastic for Keras 3 (KerasState and the three
state callbacks), from `horovod.tensorflow.keras` or `horovod.keras` (argv[1]).

Prints `OK <check>` per passed check; any failure raises (and the job ends non-zero).
"""
import importlib
import sys

import numpy as np

hvd = importlib.import_module(sys.argv[1])
elastic = importlib.import_module(sys.argv[1] + ".elastic")
import keras  # noqa: E402

hvd.init()
r = hvd.rank()
print(f"backend {keras.backend.backend()}", flush=True)
assert hvd.elastic is elastic


def ok(what):
    print(f"OK {what}", flush=True)


keras.utils.set_random_seed(r)  # different weights on the two ranks until the state syncs
model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2), keras.layers.Dense(1)])
model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.01)), loss="mse")
x = np.random.default_rng(r).normal(size=(64, 3)).astype("float32")  # more batches than any fit below runs
y = x.sum(axis=1, keepdims=True)

state = elastic.KerasState(model, batch=0, epoch=0)
assert state.optimizer is model.optimizer and state.backend is keras.backend
state.sync()
kernel = hvd.allgather(keras.ops.convert_to_numpy(model.layers[0].kernel)[None])
np.testing.assert_allclose(kernel[0], kernel[1])
ok("KerasState: sync gives every rank rank 0's weights")

commits = []
state.commit = (lambda original: lambda: (commits.append((state.epoch, state.batch)), original())[1])(state.commit)
seen = []


class Count(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        seen.append(batch)


callbacks = [elastic.UpdateBatchStateCallback(state), elastic.UpdateEpochStateCallback(state),
             elastic.CommitStateCallback(state, batches_per_commit=3), Count()]
model.fit(x, y, batch_size=4, steps_per_epoch=4, epochs=2, verbose=0, callbacks=callbacks)
assert (state.epoch, state.batch) == (2, 0), (state.epoch, state.batch)
assert seen == [0, 1, 2, 3] * 2, seen
# every 3 batches (batch 2 of epoch 0; batch 1 of epoch 1: 3 after the epoch-end commit) and at each epoch's end
assert commits == [(0, 2), (1, 0), (1, 1), (2, 0)], commits
ok("Update{Batch,Epoch}StateCallback and CommitStateCallback(batches_per_commit) in model.fit")

committed = [keras.ops.convert_to_numpy(v) for v in model.variables]
for v in model.trainable_variables:
    v.assign(keras.ops.zeros(v.shape))
state.epoch = 7
state.restore()
for v, c in zip(model.variables, committed):
    np.testing.assert_allclose(keras.ops.convert_to_numpy(v), c)
assert state.epoch == 2
ok("KerasState.restore returns weights and values to the last commit")

state.batch, seen[:] = 3, []  # as restored in the middle of an epoch: 3 of its 4 batches were done
state.epoch = 0
model.fit(x, y, batch_size=4, steps_per_epoch=4, epochs=2, verbose=0, callbacks=callbacks)
assert seen == [0] + [0, 1, 2, 3], seen
assert (state.epoch, state.batch) == (2, 0), (state.epoch, state.batch)
assert not model.stop_training
ok("UpdateBatchStateCallback: the first epoch after a restore runs only the batches not done yet")

failures = []


@elastic.run
def train(state):
    if not failures:
        failures.append(1)
        for v in model.trainable_variables:
            v.assign(keras.ops.zeros(v.shape))
        state.epoch = 99
        raise hvd.HorovodInternalError("a peer failed (simulated)")
    return state.epoch


assert train(state) == 2, state.epoch
np.testing.assert_allclose(keras.ops.convert_to_numpy(model.layers[0].kernel),
                           keras.ops.convert_to_numpy(state.model.layers[0].kernel))
assert any(np.abs(keras.ops.convert_to_numpy(v)).sum() > 0 for v in model.trainable_variables)
ok("hvd.elastic.run with KerasState: restored to the last commit and retried after HorovodInternalError")
hvd.shutdown()
