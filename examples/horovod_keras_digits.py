#!/usr/bin/env python
"""Horovod's tf.keras MNIST example, unchanged in its Horovod parts, on Keras 3 (TensorFlow backend).

Written the way Horovod's docs teach (``import horovod.tensorflow.keras as hvd``, ``hvd.init()``,
learning rate scaled by ``hvd.size()``, ``hvd.DistributedOptimizer``, the callbacks
BroadcastGlobalVariablesCallback, MetricAverageCallback and LearningRateWarmupCallback,
checkpoints and logs on rank 0 only), on the 8x8 digits set that ships inside scikit-learn
(offline).  Horovod itself does not run on Keras 3 / TensorFlow >= 2.16; this runs unchanged::

    ddlrun --horovod -n 2 python examples/horovod_keras_digits.py
    ddlrun --horovod -n 2 python examples/horovod_keras_digits.py --fp16-allreduce
    wml submit --horovod --nodes 2 examples/horovod_keras_digits.py

Changes from Horovod's script: the data; each rank shards the data and seeds its random weights
differently on purpose (the broadcast callback must make them identical); no
``experimental_run_tf_function=False`` (Keras 3's compile has no such argument); checkpoints
are ``.keras`` files.  At the end every rank compares its weights with every other rank's
(exit status 1 if they differ) and reports the test accuracy (exit status 3 below ``--target``).
"""
import argparse
import json
import os

import numpy as np
import tensorflow as tf

import horovod.tensorflow.keras as hvd

parser = argparse.ArgumentParser(description='Keras digits example (Horovod)')
parser.add_argument('--epochs', type=int, default=8)
parser.add_argument('--batch-size', type=int, default=32, help='per-rank batch size')
parser.add_argument('--lr', type=float, default=0.002, help='single-rank learning rate; scaled by hvd.size()')
parser.add_argument('--seed', type=int, default=42, help='random seed; rank r uses seed + r')
parser.add_argument('--fp16-allreduce', action='store_true', default=False,
                    help='use fp16 compression during allreduce')
parser.add_argument('--checkpoint-dir', default=None, help='rank 0 saves checkpoint-{epoch}.keras here')
parser.add_argument('--target', type=float, default=0.9,
                    help='test accuracy to reach (exit status 3 below it; 0 disables)')
parser.add_argument('--json', default=None, help='rank 0 writes the results here as JSON')


def load_digits_split():
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    x = (digits.images[..., np.newaxis] / 16.0).astype('float32')
    y = digits.target.astype('int64')
    return train_test_split(x, y, test_size=0.2, random_state=0)


def train(args):
    # Horovod: initialize Horovod.
    hvd.init()

    # Horovod: pin GPU to be used to process local rank (one GPU per process)
    gpus = tf.config.experimental.list_physical_devices('GPU')
    for gpu in gpus:
        tf.config.experimental.set_memory_growth(gpu, True)
    if gpus:
        tf.config.experimental.set_visible_devices(gpus[hvd.local_rank()], 'GPU')

    x_train, x_test, y_train, y_test = load_digits_split()
    steps_per_epoch = len(x_train) // (args.batch_size * hvd.size())

    dataset = tf.data.Dataset.from_tensor_slices((x_train, y_train))
    dataset = dataset.shard(hvd.size(), hvd.rank())
    dataset = dataset.repeat().shuffle(2000, seed=args.seed + hvd.rank()).batch(args.batch_size)

    # Each rank starts from different random weights on purpose: the broadcast callback fixes that.
    tf.keras.utils.set_random_seed(args.seed + hvd.rank())
    model = tf.keras.Sequential([
        tf.keras.Input(shape=(8, 8, 1)),
        tf.keras.layers.Conv2D(16, [3, 3], padding='same', activation='relu'),
        tf.keras.layers.Conv2D(32, [3, 3], padding='same', activation='relu'),
        tf.keras.layers.MaxPooling2D(pool_size=(2, 2)),
        tf.keras.layers.Dropout(0.25),
        tf.keras.layers.Flatten(),
        tf.keras.layers.Dense(64, activation='relu'),
        tf.keras.layers.Dropout(0.5),
        tf.keras.layers.Dense(10, activation='softmax')
    ])

    # Horovod: adjust learning rate based on number of workers.
    scaled_lr = args.lr * hvd.size()
    opt = tf.optimizers.Adam(scaled_lr)

    # Horovod: (optional) compression algorithm.
    compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none

    # Horovod: add Horovod DistributedOptimizer.
    opt = hvd.DistributedOptimizer(opt, compression=compression)

    model.compile(loss=tf.losses.SparseCategoricalCrossentropy(),
                  optimizer=opt,
                  metrics=['accuracy'])

    callbacks = [
        # Horovod: broadcast initial variable states from rank 0 to all other processes.
        # This is necessary to ensure consistent initialization of all workers when
        # training is started with random weights or restored from a checkpoint.
        hvd.callbacks.BroadcastGlobalVariablesCallback(0),

        # Horovod: average metrics among workers at the end of every epoch.
        #
        # Note: This callback must be in the list before the ReduceLROnPlateau,
        # TensorBoard or other metrics-based callbacks.
        hvd.callbacks.MetricAverageCallback(),

        # Horovod: using `lr = 1.0 * hvd.size()` from the very beginning leads to worse final
        # accuracy. Scale the learning rate `lr = 1.0` ---> `lr = 1.0 * hvd.size()` during
        # the first three epochs. See https://arxiv.org/abs/1706.02677 for details.
        hvd.callbacks.LearningRateWarmupCallback(initial_lr=scaled_lr, warmup_epochs=3, verbose=1),
    ]

    # Horovod: save checkpoints only on worker 0 to prevent other workers from corrupting them.
    if hvd.rank() == 0 and args.checkpoint_dir:
        callbacks.append(tf.keras.callbacks.ModelCheckpoint(os.path.join(args.checkpoint_dir, 'checkpoint-{epoch}.keras')))

    # Horovod: write logs on worker 0.
    verbose = 2 if hvd.rank() == 0 else 0

    # Train the model.
    # Horovod: adjust number of steps based on number of workers.
    history = model.fit(dataset, steps_per_epoch=steps_per_epoch, callbacks=callbacks, epochs=args.epochs,
                        verbose=verbose)

    # Not part of Horovod's example: every rank scores the full test set and compares weights.
    loss, accuracy = model.evaluate(x_test, y_test, verbose=0)
    flat = np.concatenate([w.reshape(-1) for w in model.get_weights()]).astype('float64')
    everyone = hvd.allgather(flat[np.newaxis, :], name='final_weights')
    max_divergence = float(np.abs(everyone - everyone[0]).max())
    identical = max_divergence == 0.0
    if hvd.rank() == 0:
        print('Test loss: {:.4f}, test accuracy: {:.4f}'.format(loss, accuracy), flush=True)
        if identical:
            print('all {} rank(s) hold identical weights'.format(hvd.size()), flush=True)
        else:
            print('ERROR: weights differ across ranks (max difference {:g})'.format(max_divergence), flush=True)
        if args.json:
            with open(args.json, 'w') as fh:
                json.dump({'ranks': hvd.size(), 'test_accuracy': float(accuracy), 'test_loss': float(loss),
                           'identical': identical, 'max_divergence': max_divergence,
                           'fp16_allreduce': args.fp16_allreduce,
                           'history': {k: [float(v) for v in vs] for k, vs in history.history.items()}},
                          fh, indent=1)
    if not identical:
        return 1
    if args.target and accuracy < args.target:
        if hvd.rank() == 0:
            print('ERROR: test accuracy {:.4f} is below the target {}'.format(accuracy, args.target), flush=True)
        return 3
    return 0


if __name__ == '__main__':
    raise SystemExit(train(parser.parse_args()))
