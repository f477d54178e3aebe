"""Horovod's exception classes for TensorFlow, so that user code that catches them keeps working.

Horovod reports a collective that ranks disagree on (shape, dtype, op, root; a rank that refused
its input) as ``tf.errors.FailedPreconditionError`` on every rank, and a collective that can no
longer complete (a peer shut down, the stall limit passed) as ``tf.errors.UnknownError``.  The
classes below are those TensorFlow classes *and* ddl_runtime's own (``DDLMismatchError``,
``HorovodInternalError``), so either ``except`` works.  Inside a graph (``tf.function``,
``tf.compat.v1`` sessions) TensorFlow raises its own class of the same code.

Input errors found when a collective runs (bad alltoall splits...) are
``tf.errors.InvalidArgumentError``, as Horovod's kernels report them, and still ValueError.
"""
from __future__ import annotations

import tensorflow as tf

from ddl_runtime.errors import DDLError, DDLInputError, DDLMismatchError

from ..common.exceptions import HorovodInternalError


class HorovodMismatchError(tf.errors.FailedPreconditionError, DDLMismatchError):
    """Ranks disagree about a collective (Horovod: FailedPreconditionError)."""

    def __init__(self, message: str):
        tf.errors.FailedPreconditionError.__init__(self, None, None, message)


class HorovodInputError(tf.errors.InvalidArgumentError, DDLInputError):
    """This rank's own input is bad (Horovod's kernels: InvalidArgumentError); also a ValueError."""

    def __init__(self, message: str):
        tf.errors.InvalidArgumentError.__init__(self, None, None, message)


class HorovodShutdownError(tf.errors.UnknownError, HorovodInternalError):
    """A collective that can no longer complete: a peer shut down, or the stall limit passed."""

    def __init__(self, message: str):
        tf.errors.UnknownError.__init__(self, None, None, message)


def as_tensorflow_error(exc: DDLError) -> BaseException:
    """The Horovod/TensorFlow class for a collective's failure."""
    if isinstance(exc, tf.errors.OpError):
        return exc
    if isinstance(exc, DDLInputError):
        return HorovodInputError(str(exc))
    if isinstance(exc, DDLMismatchError):
        return HorovodMismatchError(str(exc))
    return HorovodShutdownError(str(exc))


def failed_precondition_if(message: tf.Tensor) -> tf.Tensor:
    """An op (for graphs) that fails with FAILED_PRECONDITION and `message` when `message` is not empty.

    TensorFlow's py-function kernels report a Python exception as UNKNOWN unless it is a
    ValueError, TypeError or NotImplementedError: an OpError's own code is dropped.  The stock
    op that fails FAILED_PRECONDITION with a message chosen at run time is ReadFile of a path
    below a file (ENOTDIR), so that is what runs: the error reads
    "/dev/null/<message>; Not a directory".  The one such trick in wml; a compiled Horovod op
    would report the code itself.
    """
    def fail():
        path = tf.strings.join(["/dev/null/", tf.strings.regex_replace(message, "/", "|")])
        return tf.io.read_file(path)

    return tf.cond(tf.equal(message, ""), lambda: tf.constant(""), fail)


def raise_if_failed(status: tf.Tensor) -> list:
    """Ops (for graphs) that raise a collective's failure handed out of its py-function as
    ``status``: "" (none), "P<message>" (FAILED_PRECONDITION, see failed_precondition_if) or
    "I<message>" (INVALID_ARGUMENT, this rank's input: an assertion op, so the message is the
    one line, not a Python traceback)."""
    code = tf.strings.substr(status, 0, 1)
    message = tf.strings.regex_replace(status, "^[PI]", "")
    precondition = failed_precondition_if(tf.where(tf.equal(code, "P"), message, ""))
    invalid = tf.debugging.Assert(tf.not_equal(code, "I"), [message], name="horovod_invalid_argument")
    return [precondition, invalid]
