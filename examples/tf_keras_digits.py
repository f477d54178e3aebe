#!/usr/bin/env python
"""The WML CE DDL tf.keras example (Keras' mnist_cnn.py + `import ddl`), on scikit-learn's digits.

This is the script from IBM's DDL material with the seed's four changes only, marked ``> DDL``:
import ddl, split the training and test data with ``np.array_split(x, ddl.size())[ddl.rank()]``,
scale Adadelta's learning rate by ``ddl.size()``, and put ``DDLCallback`` first and
``DDLGlobalVariablesCallback`` last.  The one modernisation: MNIST (a download) is replaced by
the 8x8 digits that ship inside scikit-learn, so it runs offline; Keras 3 spells ``lr`` as
``learning_rate``.  Keras runs on TensorFlow (``from tensorflow import keras``)::

    python examples/tf_keras_digits.py
    ddlrun -n 2 python examples/tf_keras_digits.py
    wml submit --nodes 2 examples/tf_keras_digits.py

Each rank starts from its own random weights (no seed is set, as in the original);
``DDLGlobalVariablesCallback`` makes them rank 0's.  At the end rank 0 prints the test accuracy
on the full test set and whether all ranks hold identical weights (exit status 1 if not).
"""
from __future__ import print_function

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorFlow's C++ start-up chatter
os.environ["KERAS_BACKEND"] = "tensorflow"  # tf.keras is Keras 3: make sure it runs on TensorFlow

from tensorflow import keras  # noqa: E402
from tensorflow.keras.models import Sequential  # noqa: E402
from tensorflow.keras.layers import Dense, Dropout, Flatten  # noqa: E402
from tensorflow.keras.layers import Conv2D, MaxPooling2D  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402  (instead of keras.datasets.mnist)
import ddl  # noqa: E402  > DDL
import numpy as np  # noqa: E402  > DDL

batch_size = 128
num_classes = 10
epochs = int(os.environ.get("EPOCHS", "12"))

# input image dimensions
img_rows, img_cols = 8, 8

# the data, split between train and test sets (digits: 1797 images, 20% held out)
digits = load_digits()
order = np.random.RandomState(0).permutation(len(digits.target))
n_test = 360
x_train, y_train = digits.images[order[n_test:]], digits.target[order[n_test:]]
x_test, y_test = digits.images[order[:n_test]], digits.target[order[:n_test]]

x_train = x_train.reshape(x_train.shape[0], img_rows, img_cols, 1)
x_test = x_test.reshape(x_test.shape[0], img_rows, img_cols, 1)
input_shape = (img_rows, img_cols, 1)

# > DDL: Save the full test data before splitting for final accuracy check.
x_test_full = x_test.astype('float32') / 16
y_test_full = keras.utils.to_categorical(y_test, num_classes)

# > DDL: Split the training & testing data.
x_train = np.array_split(x_train, ddl.size())[ddl.rank()]
x_test = np.array_split(x_test, ddl.size())[ddl.rank()]
x_train = x_train.astype('float32')
x_test = x_test.astype('float32')
x_train /= 16  # digits' pixels are 0..16 (MNIST's were 0..255)
x_test /= 16
print('x_train shape:', x_train.shape)
print(x_train.shape[0], 'train samples')
print(x_test.shape[0], 'test samples')

# > DDL: Split the training & testing data.
y_train = np.array_split(y_train, ddl.size())[ddl.rank()]
y_test = np.array_split(y_test, ddl.size())[ddl.rank()]

# convert class vectors to binary class matrices
y_train = keras.utils.to_categorical(y_train, num_classes)
y_test = keras.utils.to_categorical(y_test, num_classes)

model = Sequential()
model.add(keras.Input(shape=input_shape))
model.add(Conv2D(32, kernel_size=(3, 3), activation='relu'))
model.add(Conv2D(64, (3, 3), activation='relu'))
model.add(MaxPooling2D(pool_size=(2, 2)))
model.add(Dropout(0.25))
model.add(Flatten())
model.add(Dense(128, activation='relu'))
model.add(Dropout(0.5))
model.add(Dense(num_classes, activation='softmax'))

# > DDL: adjust learning rate based on number of GPUs.
model.compile(loss=keras.losses.categorical_crossentropy,
              optimizer=keras.optimizers.Adadelta(learning_rate=1.0 * ddl.size()),
              metrics=['accuracy'])

# > DDL: Add the DDL callback (first) and the global variables callback (last).
callbacks = list()
callbacks.append(ddl.DDLCallback())
callbacks.append(ddl.DDLGlobalVariablesCallback())

model.fit(x_train, y_train,
          batch_size=batch_size,
          epochs=epochs,
          verbose=2 if ddl.rank() == 0 else 0,
          validation_data=(x_test, y_test),
          callbacks=callbacks)
score = model.evaluate(x_test_full, y_test_full, verbose=0)
print('Test loss:', score[0])
print('Test accuracy:', score[1])

# Not in the original: prove that every rank ends with the same weights.
divergence = ddl.weights_max_divergence(model)
if ddl.rank() == 0:
    print('Ranks:', ddl.size(), '- weights identical on every rank:', divergence == 0.0,
          '(max difference %g)' % divergence)
raise SystemExit(0 if divergence == 0.0 else 1)
