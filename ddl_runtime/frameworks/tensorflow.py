"""TensorFlow integration: DDL's collectives on ``tf.Tensor`` / ``tf.Variable``, eagerly and in ``tf.function``.

    import ddl_runtime.tensorflow as ddl
    ddl.init()
    with tf.GradientTape() as tape:
        loss = loss_fn(model(x), y)
    tape = ddl.DistributedGradientTape(tape)               # gradients averaged over ranks
    grads = tape.gradient(loss, model.trainable_variables)
    ddl.broadcast_variables(model.variables, root_rank=0)  # once, after the first step

Every collective is the numpy one of :mod:`ddl_runtime.collectives.ops` (one engine: fusion, the
topology-aware algorithms, mismatch detection, the stall inspector and the timeline); this
module only moves tensors in and out:

- **eagerly**, on the CPU, the engine reads TensorFlow's own buffer (no ``numpy()`` copy);
  ``allreduce_n`` reduces out of place (:func:`ddl_runtime.collectives.ops.allreduce_n_into`) into 64-byte
  aligned host memory from a reused pool, which becomes the result ``tf.Tensor`` through DLPack
  without another copy; the single-tensor collectives reduce a host copy in place;
- **inside ``tf.function``** the same call runs through ``tf.numpy_function`` (stateful, so
  tf.function keeps collectives in program order on every rank), with the output shapes and
  dtypes set, so the traced graph knows them.  AutoGraph is told to leave ddl_runtime alone
  (`_exempt_from_autograph`): converted, the function run at every step cost milliseconds.

Reductions are differentiable (``tf.custom_gradient``): the gradient of ``allreduce`` is the
same allreduce of the upstream gradient (sum stays sum, avg stays avg); ``allgather``'s is
the summed upstream gradient's slice for this rank, ``bcast``'s the summed upstream gradient
on the root and zero elsewhere.

Tensors on a GPU take the same path, staged through host memory; results go back to the
input's device.  A collective cannot run inside an XLA cluster (``jit_compile=True``): Keras'
``DDLCallback`` turns XLA off for the train step (see ``ddl_runtime.keras``).

Errors: bad input raises :class:`DDLInputError` before anything is sent (eagerly, or while
``tf.function`` traces).  A :class:`DDLMismatchError` raised while a traced function *runs*
reaches the caller the way TensorFlow reports any failing op, as a ``tf.errors.OpError`` whose
message carries the one-line DDL error, and that error is also a :class:`DDLMismatchError`
(``_raise_ddl_errors_as_themselves``), so either ``except`` catches it; :func:`last_error`
returns the DDL exception as it was raised.

Training that outlives a job (``wml submit --chain``): :class:`Checkpointer`
(ddl_runtime.checkpoint.tensorflow) restores a custom loop's variables and step and, at the
agreed stop, saves and exits 75.
"""
from __future__ import annotations

from typing import Any, Callable, List, Optional, Sequence

import numpy as np
import tensorflow as tf

from tensorflow.python import pywrap_tfe as _pywrap_tfe  # DLPack without from_dlpack's per-call wrapper
from tensorflow.python.eager import context as _tf_context
from tensorflow.python.eager import record as _tf_record
from tensorflow.python.framework.ops import EagerTensor as _EagerTensor

import ddl_runtime as _ddl
from ddl_runtime.engine.buffers import FLOAT_DTYPES, SUPPORTED_DTYPES
from ddl_runtime.core.stats import building_gradient_reduction, gradient_reduction
from ddl_runtime.errors import DDLError, DDLInputError, DDLMismatchError
from ddl_runtime.state import runtime as _runtime
from ddl_runtime.transports.shm.output_pool import ALIGN, RESULTS, packed_layout
from ddl_runtime.checkpoint.tensorflow import Checkpointer  # noqa: F401  (training that outlives a job)

__all__ = [
    "init", "is_initialized", "rank", "size", "local_rank", "local_size", "cross_rank", "cross_size",
    "barrier", "allreduce", "allreduce_n", "allreduce_n_async", "bcast", "bcast_n", "allgather",
    "DistributedGradientTape", "broadcast_variables", "shard", "scale_lr",
    "last_error", "take_error", "DDLError", "DDLInputError", "DDLMismatchError", "Checkpointer",
]

_errors: List[DDLError] = []  # raised inside numpy_function (which runs on a TensorFlow thread)


def _exempt_from_autograph() -> None:
    """Keep AutoGraph from converting ddl_runtime (horovod layer included) inside a tf.function.

    This code branches only on Python values, so conversion buys nothing; but a converted
    function stays converted, and the function run by tf.numpy_function at every step would
    route each of its calls through AutoGraph's converted_call (~8 ms per ResNet-50 step,
    measured).  TensorFlow keeps such rules for its own packages in an internal list; there is
    no public switch for a whole package (tf.autograph.experimental.do_not_convert marks one
    function).  Without the internal list, nothing changes but the speed.
    """
    try:
        from tensorflow.python.autograph.core import config, config_lib
    except ImportError:  # pragma: no cover - TensorFlow moved its internals
        return
    if not any(isinstance(r, config_lib.DoNotConvert) and r.matches("ddl_runtime") for r in config.CONVERSION_RULES):
        config.CONVERSION_RULES = (config_lib.DoNotConvert("ddl_runtime"),) + tuple(config.CONVERSION_RULES)


_exempt_from_autograph()

_COMBINED: dict = {}  # (DDL error class, TF error class) -> a class deriving from both


def _combined(ddl_cls: type, tf_cls: type) -> type:
    cls = _COMBINED.get((ddl_cls, tf_cls))
    if cls is None:
        def __init__(self, *args, **kwargs):  # the TensorFlow side builds the error's state
            tf_cls.__init__(self, *args, **kwargs)

        cls = _COMBINED[(ddl_cls, tf_cls)] = type(ddl_cls.__name__, (ddl_cls, tf_cls),
                                                  {"__init__": __init__, "__module__": ddl_cls.__module__})
    return cls


def _raise_ddl_errors_as_themselves() -> None:
    """Make the OpError of a collective that failed inside a tf.function also the DDL error.

    A DDLError raised inside tf.numpy_function reaches the caller of a tf.function as the
    tf.errors.OpError that TensorFlow's runtime builds from the failed op's status (from C++,
    by calling the error class): the Python class is lost on the way.  OpError.__new__ is
    wrapped so that an error whose message carries the DDL error this rank last raised
    (last_error()) is made an instance of a class deriving from both, e.g. DDLMismatchError and
    tf.errors.UnknownError: ``except ddl.DDLMismatchError`` and ``except tf.errors.OpError``
    both catch it, and its message is TensorFlow's.  Every other error is made as before
    (the check costs nothing while no DDL error is pending).
    """
    base = tf.errors.OpError
    if getattr(base, "_ddl_wrapped_new", False):
        return
    original = base.__new__

    def __new__(cls, *args, **kwargs):
        err = _errors[-1] if _errors else None
        if err is not None and not issubclass(cls, DDLError):
            message = args[2] if len(args) > 2 else kwargs.get("message")
            if isinstance(message, str) and f"{type(err).__name__}: {err}" in message:
                cls = _combined(type(err), cls)
        return original(cls, *args, **kwargs) if original is not object.__new__ else original(cls)

    base.__new__ = staticmethod(__new__)
    base._ddl_wrapped_new = True


_raise_ddl_errors_as_themselves()


# -- basics ---------------------------------------------------------------------------------
def init():
    """Initialize the runtime (idempotent); returns ddl_runtime's JobInfo."""
    return _ddl.init()


def is_initialized() -> bool:
    return _ddl.is_initialized()


def _require_init(what: str) -> None:
    if not _ddl.is_initialized():
        raise DDLInputError(f"{what}: ddl_runtime is not initialized; call ddl_runtime.tensorflow.init() first")


def rank() -> int:
    _require_init("rank()")
    return _ddl.rank()


def size() -> int:
    _require_init("size()")
    return _ddl.size()


def local_rank() -> int:
    _require_init("local_rank()")
    return _ddl.local_rank()


def local_size() -> int:
    _require_init("local_size()")
    return _ddl.local_size()


def cross_rank() -> int:
    _require_init("cross_rank()")
    return _ddl.cross_rank()


def cross_size() -> int:
    _require_init("cross_size()")
    return _ddl.cross_size()


def barrier() -> None:
    """Wait until every rank arrives (eager only: it returns nothing a graph could depend on)."""
    _require_init("barrier()")
    _ddl.barrier()


def shard(data: Any) -> Any:
    """This rank's part of `data`, as np.array_split(data, size())[rank()]."""
    _require_init("shard()")
    return _ddl.shard(data)


def scale_lr(lr: float) -> float:
    """lr * size() (DDL's linear scaling rule)."""
    _require_init("scale_lr()")
    return _ddl.scale_lr(lr)


def last_error() -> Optional[DDLError]:
    """The DDLError that the last failing collective raised inside a tf.function, if any."""
    return _errors[-1] if _errors else None


def take_error() -> Optional[DDLError]:
    """last_error(), and forget it (so a later, unrelated TensorFlow error is not mistaken for it)."""
    err = last_error()
    _errors.clear()
    return err


# -- validation and conversion --------------------------------------------------------------
def _dtype_name(t: Any) -> str:
    return t.dtype.base_dtype.name


_SUPPORTED_TF = frozenset(tf.as_dtype(d) for d in SUPPORTED_DTYPES)
_DLPACK_TF = _SUPPORTED_TF - {tf.bfloat16}  # DLPack has no bfloat16 (_to_tensor moves its bits)


def _check(x: Any, name: str) -> Any:
    """Validate one input; returns it as a tf.Tensor (a Variable's current value)."""
    if type(x) is _EagerTensor and x.dtype in _SUPPORTED_TF:  # the common case, checked first
        return x
    if isinstance(x, tf.RaggedTensor):
        raise DDLInputError(f"tensor '{name}' is a tf.RaggedTensor; pass a dense tensor (x.to_tensor())")
    if isinstance(x, (tf.SparseTensor, tf.IndexedSlices)):
        raise DDLInputError(f"tensor '{name}' is a {type(x).__name__}; pass a dense tensor (tf.convert_to_tensor(x))")
    if not isinstance(x, (tf.Tensor, tf.Variable)):
        raise DDLInputError(
            f"tensor '{name}' is a {type(x).__module__}.{type(x).__qualname__}; expected a tf.Tensor or tf.Variable")
    dtype = _dtype_name(x)
    if dtype not in SUPPORTED_DTYPES:
        raise DDLInputError(f"tensor '{name}' has unsupported dtype {dtype}; supported: {', '.join(SUPPORTED_DTYPES)}")
    if isinstance(x, tf.Variable):
        x = tf.convert_to_tensor(x)
    if x.shape.rank is None or None in x.shape.as_list():
        if tf.executing_eagerly():  # pragma: no cover - eager tensors always have a full shape
            raise DDLInputError(f"tensor '{name}' has an unknown shape {x.shape}")
    return x


def _names(n: int, names: Optional[Sequence[str]], what: str) -> List[str]:
    if names is None:
        return [f"tensor.{i}" for i in range(n)]
    if isinstance(names, str) or not isinstance(names, (list, tuple)):
        raise DDLInputError(f"{what}: names must be a list of strings, got {type(names).__name__}")
    names = [str(s) for s in names]
    if len(names) != n:
        raise DDLInputError(f"{what}: {len(names)} names for {n} tensors")
    return names


def _as_list(tensors: Any, what: str) -> list:
    if isinstance(tensors, (tf.Tensor, tf.Variable)) or not isinstance(tensors, (list, tuple)):
        raise DDLInputError(f"{what}: expected a list of tensors, got {type(tensors).__name__}")
    return list(tensors)


def _host_copy(src: np.ndarray) -> np.ndarray:
    """The values in fresh aligned host memory that an in-place collective may overwrite
    (TensorFlow tensors are immutable).  allreduce_n needs no such copy: it runs out of place."""
    out = RESULTS.take(src.shape, src.dtype)  # the runtime's result pool (output_pool.RESULTS)
    np.copyto(out, src)
    return out


def _view(a: np.ndarray) -> np.ndarray:
    """The tensor's values as they are (read only): for collectives that write elsewhere."""
    return a


def _source(t: tf.Tensor) -> np.ndarray:
    """An eager tensor's values as numpy (bfloat16 comes back as ml_dtypes.bfloat16), not to be written.

    On the CPU this is TensorFlow's own buffer, read through EagerTensor._numpy() (no copy);
    elsewhere ``numpy()`` stages it through host memory first.
    """
    view = getattr(t, "_numpy", None) if "CPU" in (t.device or "CPU").upper() else None
    return np.asarray(view() if view is not None else t.numpy())


def _to_numpy(t: tf.Tensor) -> np.ndarray:
    """A writable host copy of an eager tensor."""
    return _host_copy(_source(t))


def _wrap_pooled(a: np.ndarray) -> tf.Tensor:
    """A pooled result (aligned, C-contiguous, not bfloat16) as a CPU tf.Tensor sharing its memory."""
    return _pywrap_tfe.TFE_FromDlpackCapsule(a.__dlpack__(), _tf_context.context()._handle)


def _to_tensor(a: np.ndarray, dtype: tf.DType, device: str = "") -> tf.Tensor:
    """Wrap a result as a `dtype` tf.Tensor on `device`; aligned host memory is shared through DLPack, not copied."""
    a = np.asarray(a)
    if a.dtype != dtype.as_numpy_dtype:
        a = a.astype(dtype.as_numpy_dtype)
    out = None
    if a.ctypes.data % ALIGN == 0 and a.flags.c_contiguous:
        try:
            if a.dtype.name == "bfloat16":  # DLPack has no bfloat16: move the bits, reinterpret them
                out = tf.bitcast(tf.experimental.dlpack.from_dlpack(a.view(np.uint16).__dlpack__()), tf.bfloat16)
            else:
                out = tf.experimental.dlpack.from_dlpack(a.__dlpack__())
        except (BufferError, TypeError, ValueError, tf.errors.OpError):
            out = None
    if out is None:
        out = tf.convert_to_tensor(a, dtype=dtype)
    if device and "CPU" not in device.upper():
        with tf.device(device):
            return tf.identity(out)
    return out


def _run(core: Callable[[List[np.ndarray]], List[np.ndarray]], tensors: List[tf.Tensor],
         out_shapes: List[tf.TensorShape], what: str, out_dtypes: Optional[List[tf.DType]] = None,
         host: Callable[[np.ndarray], np.ndarray] = _host_copy, prefix: str = "ddl_") -> List[tf.Tensor]:
    """Apply `core` (numpy arrays in, numpy arrays out) eagerly or as a stateful graph op.

    `core` gets host(values) of every tensor: by default a writable copy of its own (_host_copy);
    _view hands it the tensor's values without a copy (the core must not write them).  Outputs
    are `out_dtypes` (default: each input's dtype), cast when the core returns another dtype, with
    static shapes `out_shapes`.  A DDLError raised inside a traced function is kept for
    last_error() / take_error(); TensorFlow itself reports it as a tf.errors.OpError.
    """
    out_dtypes = list(out_dtypes) if out_dtypes is not None else [t.dtype for t in tensors]
    if tf.executing_eagerly():
        outs = core([host(_source(t)) for t in tensors])
        devices = [t.device for t in tensors] + [""] * max(0, len(out_dtypes) - len(tensors))
        return [_to_tensor(o, d, dev) for o, d, dev in zip(outs, out_dtypes, devices)]

    def fn(*arrays):
        outs = _keeping_ddl_error(core, [host(np.asarray(a)) for a in arrays])
        return [np.asarray(o) if np.asarray(o).dtype == d.as_numpy_dtype else np.asarray(o).astype(d.as_numpy_dtype)
                for o, d in zip(outs, out_dtypes)]

    _check_not_xla(what)
    outs = tf.numpy_function(fn, tensors, out_dtypes, stateful=True, name=prefix + what.split("(")[0])
    outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    for o, shape in zip(outs, out_shapes):
        o.set_shape(shape)
    return outs


def timed_gradient_step(core: Callable[[List[np.ndarray]], Any]) -> Callable[[List[np.ndarray]], Any]:
    """`core` as it is built now: inside core.stats.gradient_reduction() each run of it (every
    step, also in a traced function) reports its bytes to this rank's record, which ends a step
    there (the collectives in it count their own time)."""
    if not building_gradient_reduction():
        return core
    stats = _runtime.current().stats
    size = [-1, 0]     # gradients keep their variables' shapes: their bytes, counted once per count

    def timed(arrays):
        out = core(arrays)
        if size[0] != len(arrays):
            size[:] = [len(arrays), sum(a.nbytes for a in arrays)]
        stats.reduced(size[1])
        return out

    return timed


def _keeping_ddl_error(core: Callable[[List[np.ndarray]], Any], arrays: List[np.ndarray]) -> Any:
    """core(arrays) inside a tf.numpy_function: a DDLError it raises is kept for last_error()
    (and for _raise_ddl_errors_as_themselves) before TensorFlow turns it into an OpError."""
    try:
        return core(arrays)
    except DDLError as exc:
        _errors[:] = [exc]
        raise


def _check_not_xla(what: str) -> None:
    try:
        from tensorflow.python.framework import ops as _tf_ops
        from tensorflow.python.ops import control_flow_util
    except ImportError:  # pragma: no cover - TF internals moved
        return
    if control_flow_util.GraphOrParentsInXlaContext(_tf_ops.get_default_graph()):
        raise DDLError(f"{what}: a ddl_runtime collective cannot run inside XLA (jit_compile=True); "
                       "compile it without jit_compile (Keras: model.compile(jit_compile=False), or use DDLCallback)")


def _could_record() -> bool:
    """True when a GradientTape (or forward accumulator) is active, so a gradient may be asked for."""
    return _tf_record.could_possibly_record()


def _is_float(t: tf.Tensor) -> bool:
    return _dtype_name(t) in FLOAT_DTYPES


def _with_gradient(forward: Callable[[List[tf.Tensor]], List[tf.Tensor]],
                   backward: Callable[[List[tf.Tensor], List[tf.Tensor], List[tf.Tensor]], List[Any]],
                   tensors: List[tf.Tensor]) -> List[tf.Tensor]:
    """forward(tensors), differentiable through `backward(upstream, inputs, outputs)`."""
    if (tf.executing_eagerly() and not _could_record()) or not any(_is_float(t) for t in tensors):
        return forward(tensors)  # nothing could ask for a gradient: skip custom_gradient's identity ops

    @tf.custom_gradient
    def op(*xs):
        ys = forward(list(xs))

        def grad(*dys):
            dys = [tf.zeros_like(y) if d is None else d for d, y in zip(dys, ys)]
            return backward(dys, list(xs), ys)

        return ys, grad

    out = op(*tensors)
    return list(out) if isinstance(out, (list, tuple)) else [out]


# -- reductions ------------------------------------------------------------------------------
def allreduce(x: Any, op: str = "sum", name: Optional[str] = None) -> tf.Tensor:
    """Reduce `x` over all ranks: op sum / avg / min / max.  Returns a new tf.Tensor (same dtype and shape)."""
    name = str(name or "tensor")
    _require_init(f"allreduce('{name}')")
    if op not in ("sum", "avg", "min", "max"):
        raise DDLInputError(f"allreduce('{name}'): op {op!r} is not one of sum, avg, min, max")
    t = _check(x, name)
    if op == "avg" and not _is_float(t):
        raise DDLInputError(f"allreduce: op 'avg' needs floating-point tensors; tensor '{name}' is {_dtype_name(t)} "
                            "(use op='sum')")

    def forward(ts):
        return _run(lambda arrays: [_ddl.allreduce(arrays[0], op=op, name=name)], ts, [ts[0].shape],
                    f"allreduce('{name}')")

    def backward(dys, xs, ys):
        if op in ("sum", "avg"):
            return [allreduce(dys[0], op=op, name=f"grad:{name}")]
        return [dys[0] * tf.cast(tf.equal(xs[0], ys[0]), dys[0].dtype)]  # min/max: where this rank won

    return _with_gradient(forward, backward, [t])[0]


def _reduce_n(tensors: List[tf.Tensor], op: str, mpi: bool, check: float, names: List[str]) -> List[tf.Tensor]:
    what = "allreduce_n"

    def core(arrays):  # out of place: read TensorFlow's buffers, results in memory the runtime picks
        return _ddl.allreduce_n_fresh(arrays, op=op, mpi=mpi, check=check, names=names)[1]

    core = timed_gradient_step(core)

    def forward(ts):
        if tf.executing_eagerly() and all(t.dtype in _DLPACK_TF and "CPU" in t.device for t in ts):
            # the hot path of an eager training step: TensorFlow's buffers in, pooled memory out
            outs = core([t._numpy() for t in ts])
            return [_wrap_pooled(o) if o.size else _to_tensor(o, t.dtype) for o, t in zip(outs, ts)]
        if not tf.executing_eagerly() and len(ts) > 1 and len({t.dtype for t in ts}) == 1 \
                and ts[0].dtype in _DLPACK_TF and all(t.shape.is_fully_defined() for t in ts):
            return _graph_one_output(ts, op, mpi, check, names)
        return _run(core, ts, [t.shape for t in ts], what, host=_view)

    def backward(dys, xs, ys):
        floats = [i for i, x in enumerate(xs) if _is_float(x)]
        reduced = _reduce_n([dys[i] for i in floats], op, mpi, check, [f"grad:{names[i]}" for i in floats])
        out: List[Any] = [None] * len(xs)
        for i, r in zip(floats, reduced):
            out[i] = r
        return out

    return _with_gradient(forward, backward, tensors)


def _graph_one_output(ts: List[tf.Tensor], op: str, mpi: bool, check: float, names: List[str]) -> List[tf.Tensor]:
    """allreduce_n inside a traced function, for tensors of one dtype with static shapes.

    The stateful numpy_function returns the one flat buffer of allreduce_n_fresh (on one host:
    the shared-memory region the peers wrote) holding every result at a 64-byte aligned offset,
    and the graph cuts it with tf.slice + tf.reshape.  TensorFlow makes a dim-0 slice a view
    when both its ends are 64-byte aligned (or it ends the buffer); a tensor whose size is not a
    multiple of 64 bytes is copied (1 of ResNet-50's 161: the 1000-element bias).
    numpy_function converts each output separately: one output instead of 161 saves about a
    millisecond per ResNet-50 step.
    """
    dtype = np.dtype(ts[0].dtype.as_numpy_dtype)
    sizes = [t.shape.num_elements() for t in ts]
    offsets, total = packed_layout(sizes, dtype.itemsize)
    shapes = [tuple(t.shape.as_list()) for t in ts]

    core = timed_gradient_step(lambda a: _ddl.allreduce_n_fresh(a, op=op, mpi=mpi, check=check, names=names)[0])

    def fn(*arrays):
        return _keeping_ddl_error(core, [np.asarray(a) for a in arrays])

    _check_not_xla("allreduce_n")
    flat_t = tf.numpy_function(fn, ts, ts[0].dtype, stateful=True, name="ddl_allreduce_n")
    flat_t.set_shape([total])
    return [tf.reshape(tf.slice(flat_t, [o], [n]), shape) for o, n, shape in zip(offsets, sizes, shapes)]


def _prepare_n(tensors: Any, op: str, names: Optional[Sequence[str]], what: str, ops=("sum", "avg")):
    _require_init(what)
    tensors = _as_list(tensors, what)
    if op not in ops:
        raise DDLInputError(f"{what}: op {op!r} is not one of {', '.join(ops)}")
    names = _names(len(tensors), names, what)
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise DDLInputError(f"{what}: duplicate tensor name '{dup}'")
    ts = [_check(t, n) for t, n in zip(tensors, names)]
    if op == "avg":
        for t, n in zip(ts, names):
            if not _is_float(t):
                raise DDLInputError(f"{what}: op 'avg' needs floating-point tensors; tensor '{n}' is {_dtype_name(t)} "
                                    "(use op='sum')")
    return ts, names


def allreduce_n(tensors: Sequence[Any], op: str = "sum", mpi: bool = False, check: float = 0.0,
                names: Optional[Sequence[str]] = None) -> List[tf.Tensor]:
    """Reduce a list of tensors in one fused, topology-aware call (op sum / avg); returns new tensors.

    ``mpi=True`` forces one flat MPI_Allreduce per bucket; ``check=tol`` compares against that
    baseline (see ddl_runtime.allreduce_n).  ``names`` name the tensors in errors and the timeline.
    """
    ts, names = _prepare_n(tensors, op, names, "allreduce_n")
    if not isinstance(mpi, bool):
        raise DDLInputError(f"allreduce_n: mpi must be True or False, got {mpi!r}")
    try:
        check = float(check)
    except (TypeError, ValueError):
        raise DDLInputError(f"allreduce_n: check must be a tolerance (float), got {check!r}") from None
    if not check >= 0:
        raise DDLInputError(f"allreduce_n: check must be 0 (off) or a positive tolerance, got {check!r}")
    if not ts:
        return []
    return _reduce_n(ts, op, mpi, check, names)


class Handle:
    """What allreduce_n_async returns: ``wait()`` gives the reduced tensors, ``done()`` polls."""

    def __init__(self, inner: Any, like: List[tf.Tensor], results: Optional[List[tf.Tensor]] = None):
        self._inner, self._like, self._results = inner, like, results

    def done(self) -> bool:
        return self._results is not None or self._inner.done()

    def wait(self) -> List[tf.Tensor]:
        if self._results is None:
            arrays = self._inner.wait()
            self._results = [_to_tensor(a, t.dtype, t.device) for a, t in zip(arrays, self._like)]
        return self._results


def allreduce_n_async(tensors: Sequence[Any], op: str = "avg", names: Optional[Sequence[str]] = None) -> Handle:
    """Start reducing a list of tensors; ``handle.wait()`` returns the reduced tensors.

    Eagerly the reduction overlaps with whatever runs until wait().  Inside tf.function there is
    nothing to overlap with (the graph's op runs to completion): the handle is already done.
    Not differentiable eagerly (use allreduce_n under a GradientTape).
    """
    ts, names = _prepare_n(tensors, op, names, "allreduce_n_async")
    if not tf.executing_eagerly():
        return Handle(None, ts, _reduce_n(ts, op, False, 0.0, names) if ts else [])
    arrays = [_to_numpy(t) for t in ts]
    return Handle(_ddl.allreduce_n_async(arrays, op=op, names=names), ts)


# -- broadcast and gather --------------------------------------------------------------------
def _check_root(root: Any, what: str) -> int:
    if not isinstance(root, (int, np.integer)) or isinstance(root, bool) or not 0 <= int(root) < _ddl.size():
        raise DDLInputError(f"{what}: root {root!r} is not a rank of this job (0..{_ddl.size() - 1})")
    return int(root)


def bcast_n(tensors: Sequence[Any], root: int = 0, names: Optional[Sequence[str]] = None) -> List[tf.Tensor]:
    """The root's values of a list of tensors, on every rank (new tensors; Variables are not assigned)."""
    _require_init("bcast")
    tensors = _as_list(tensors, "bcast")
    root = _check_root(root, "bcast")
    names = _names(len(tensors), names, "bcast")
    ts = [_check(t, n) for t, n in zip(tensors, names)]
    if not ts:
        return []

    def forward(xs):
        return _run(lambda arrays: _ddl.bcast_n(arrays, root=root, names=names), xs, [x.shape for x in xs],
                    f"bcast('{names[0]}')")

    def backward(dys, xs, ys):
        floats = [i for i, x in enumerate(xs) if _is_float(x)]
        summed = _reduce_n([dys[i] for i in floats], "sum", False, 0.0, [f"grad:{names[i]}" for i in floats])
        out: List[Any] = [None] * len(xs)
        for i, g in zip(floats, summed):
            out[i] = g if _ddl.rank() == root else tf.zeros_like(g)
        return out

    return _with_gradient(forward, backward, ts)


def bcast(x: Any, root: int = 0, name: Optional[str] = None) -> tf.Tensor:
    """The root's value of `x` on every rank (a new tensor)."""
    return bcast_n(_one(x, "bcast"), root=root, names=[str(name or "tensor")])[0]


def _one(x: Any, what: str) -> list:
    if isinstance(x, (list, tuple)):
        raise DDLInputError(f"{what}: expected one tensor, got a {type(x).__name__} (use {what}_n for lists)"
                            if what != "allgather" else f"{what}: expected one tensor, got a {type(x).__name__}")
    return [x]


def allgather(x: Any, name: Optional[str] = None) -> tf.Tensor:
    """Every rank's `x` concatenated along axis 0 (first dimensions may differ; a 0-d x counts as (1,))."""
    name = str(name or "tensor")
    _require_init(f"allgather('{name}')")
    t = _check(_one(x, "allgather")[0], name)
    rest = t.shape[1:] if t.shape.rank else tf.TensorShape([])

    def forward(xs):
        out = _run(lambda arrays: [_ddl.allgather(arrays[0], name=name)], xs,
                   [tf.TensorShape([None]).concatenate(rest)], f"allgather('{name}')")
        return out

    def backward(dys, xs, ys):
        summed = allreduce(dys[0], op="sum", name=f"grad:{name}")
        rows = tf.reshape(tf.shape(xs[0], out_type=tf.int64)[:1], [1]) if xs[0].shape.rank else tf.ones([1], tf.int64)
        counts = allgather(rows, name=f"grad-rows:{name}")
        start = tf.reduce_sum(counts[:_ddl.rank()])
        mine = summed[start:start + counts[_ddl.rank()]]
        return [tf.reshape(mine, tf.shape(xs[0]))]

    return _with_gradient(forward, backward, [t])[0]


def broadcast_variables(variables: Sequence[Any], root_rank: int = 0) -> Optional[tf.Operation]:
    """Assign the root's values to `variables` (tf.Variable or Keras variables) on every rank.

    One fused broadcast.  Eagerly returns None; inside tf.function returns the grouped assign op.
    """
    variables = list(variables)
    values = [v.value if not isinstance(v, tf.Variable) and hasattr(v, "value") else v for v in variables]
    names = [_var_name(v, i) for i, v in enumerate(variables)]
    if len(set(names)) != len(names):
        names = [f"variable.{i}" for i in range(len(variables))]
    new = bcast_n(values, root=root_rank, names=names)
    assigns = [v.assign(n) for v, n in zip(variables, new)]
    if tf.executing_eagerly():
        return None
    return tf.group(*assigns)


def _var_name(v: Any, i: int) -> str:
    return str(getattr(v, "path", None) or getattr(v, "name", None) or f"variable.{i}")


# -- training helpers -------------------------------------------------------------------------
class DistributedGradientTape:
    """Wraps a tf.GradientTape: ``gradient()`` returns gradients reduced over ranks (op avg by default).

    Use it after recording (``tape = DistributedGradientTape(tape)``) or as the tape itself
    (``with DistributedGradientTape(tf.GradientTape()) as tape:``).  All gradients go through
    one fused ``allreduce_n``; IndexedSlices become dense.  A gradient that is None stays None
    and must be None on every rank (otherwise DDLMismatchError).  Works eagerly and in tf.function.
    """

    def __init__(self, tape: tf.GradientTape, op: str = "avg"):
        if not isinstance(tape, tf.GradientTape):
            raise DDLInputError(f"DistributedGradientTape: expected a tf.GradientTape, got {type(tape).__name__}")
        if op not in ("avg", "sum"):
            raise DDLInputError(f"DistributedGradientTape: op {op!r} is not one of avg, sum")
        self._tape, self._op = tape, op

    def __enter__(self):
        self._tape.__enter__()
        return self

    def __exit__(self, *exc):
        return self._tape.__exit__(*exc)

    def __getattr__(self, name):
        return getattr(self._tape, name)

    def gradient(self, target, sources, output_gradients=None,
                 unconnected_gradients=tf.UnconnectedGradients.NONE):
        grads = self._tape.gradient(target, sources, output_gradients=output_gradients,
                                    unconnected_gradients=unconnected_gradients)
        _require_init("DistributedGradientTape.gradient")
        flat_sources = tf.nest.flatten(sources)
        flat = tf.nest.flatten(grads, expand_composites=False)
        names = [_var_name(s, i) for i, s in enumerate(flat_sources)]
        if len(set(names)) != len(names) or len(names) != len(flat):
            names = [f"source.{i}" for i in range(len(flat))]
        present = [i for i, g in enumerate(flat) if g is not None]
        dense = [tf.convert_to_tensor(flat[i]) for i in present]
        with gradient_reduction():  # each run of it ends a step in this rank's record (core/stats.py)
            reduced = allreduce_n(dense, op=self._op, names=[f"grad:{names[i]}" for i in present]) \
                if size() > 1 else dense
        out = list(flat)
        for i, r in zip(present, reduced):
            out[i] = r
        return tf.nest.pack_sequence_as(grads, out)
