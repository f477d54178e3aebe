"""horovod.tensorflow's collectives on ddl_runtime's name-negotiated engine (ddl_runtime.collectives.negotiation).

The same engine as horovod.torch: a request is matched across the ranks of its process set by
name, so disagreements (shape, dtype, op, root, splits) fail on every rank with one line
naming the tensor and the ranks, and a missing rank is named by the stall inspector.  Tensors
move as host numpy arrays: eagerly directly, inside ``tf.function`` through one stateful
``tf.numpy_function`` per collective (the engine runs when the graph executes; unnamed
operations are numbered then, in program order).  Every op is differentiable with Horovod's
gradient rules (allreduce -> allreduce of the gradient; allgather -> this rank's rows of the
summed gradient; broadcast -> the summed gradient on the root, zero elsewhere; alltoall -> the
reverse alltoall; reducescatter -> allgather, times size for Sum).  Collectives cannot run inside XLA.
"""
from __future__ import annotations

from typing import Any, Callable, List, Optional

import numpy as np
import tensorflow as tf

from ddl_runtime.errors import DDLError, DDLInputError
from ddl_runtime.frameworks.tensorflow import _source, _to_tensor, _with_gradient, timed_gradient_step
from ddl_runtime.engine.kernels import scatter_rows
from ddl_runtime.collectives.negotiation import Request

from ..common.basics import Adasum, Average, Sum, local_rank, local_size, reduce_op  # noqa: F401
from ..common.process_sets import check_known, controller_for, global_process_set
from ..common.requests import alltoall_send_rows, scales as _scales, submit as _submit
from .compression import Compression
from .errors import as_tensorflow_error, raise_if_failed
from .naming import refusing, request_name

_MOVABLE = (tf.uint8, tf.int8, tf.uint16, tf.int16, tf.int32, tf.int64, tf.float16, tf.bfloat16, tf.float32,
            tf.float64, tf.bool)
_REDUCIBLE = tuple(d for d in _MOVABLE if d != tf.bool)


# -- tensors <-> numpy, eagerly or inside tf.function -------------------------------------------
def _check(t: Any, what: str, reduce: bool) -> tf.Tensor:
    if isinstance(t, tf.IndexedSlices):
        raise DDLInputError(f"{what}: IndexedSlices are reduced by allreduce only")
    if not isinstance(t, (tf.Tensor, tf.Variable)):
        try:
            t = tf.convert_to_tensor(t)
        except (TypeError, ValueError):
            raise DDLInputError(f"{what}: expected a tf.Tensor, got {type(t).__name__}") from None
    if t.dtype.base_dtype not in (_REDUCIBLE if reduce else _MOVABLE):  # base: a TF1 ref variable's float32_ref
        raise DDLInputError(f"{what}: dtype {t.dtype.base_dtype.name} is not supported")
    return tf.convert_to_tensor(t)


def _host(a: Any) -> np.ndarray:
    """A writable C-contiguous numpy array of our own (copied only when `a` is not one already);
    bfloat16 travels as float32 (MPI has no bfloat16)."""
    a = np.asarray(a)
    if a.dtype.name == "bfloat16":
        return a.astype(np.float32)
    if not (a.flags.writeable and a.flags.c_contiguous and a.flags.owndata):
        a = np.array(a, copy=True, order="C")
    return a


def _readonly(a: Any) -> np.ndarray:
    """The tensor's values as they are, not to be written (bfloat16 as float32: MPI has none)."""
    a = np.asarray(a)
    return a.astype(np.float32) if a.dtype.name == "bfloat16" else a


def _bridge(core: Callable[[List[np.ndarray]], List[np.ndarray]], tensors: List[tf.Tensor],
            out_dtypes: List[tf.DType], out_shapes: List[tf.TensorShape], what: str,
            host: Callable[[Any], np.ndarray] = _host) -> List[tf.Tensor]:
    """Run `core` (numpy in, numpy out) now, or as a stateful op when tracing a tf.function.

    `core` gets host(values) of each tensor: by default a writable copy of its own (_host);
    _readonly hands it TensorFlow's own buffer (eagerly: no copy; the core only reads it).
    Eager results become tensors through DLPack where their memory allows (no copy)."""
    if tf.executing_eagerly():
        outs = core([host(_source(t)) for t in tensors])
        return [_to_tensor(o, d) for o, d in zip(outs, out_dtypes)]

    def fn(*arrays):
        try:
            outs = core([host(a) for a in arrays])
        except (tf.errors.FailedPreconditionError, tf.errors.InvalidArgumentError) as exc:
            # handed to the ops below, which raise it under its own class with its one line
            code = "P" if isinstance(exc, tf.errors.FailedPreconditionError) else "I"
            return [_placeholder(d, shape) for d, shape in zip(out_dtypes, out_shapes)] + \
                [np.bytes_(code + str(exc))]
        return [np.asarray(o).astype(d.as_numpy_dtype) if np.asarray(o).dtype != d.as_numpy_dtype
                else np.asarray(o) for o, d in zip(outs, out_dtypes)] + [np.bytes_(b"")]

    outs = tf.numpy_function(fn, tensors, list(out_dtypes) + [tf.string], stateful=True,
                             name="hvd_" + what.split("(")[0])
    outs = list(outs)
    with tf.control_dependencies(raise_if_failed(outs[-1])):
        outs = [tf.identity(o) for o in outs[:-1]]
    for o, shape in zip(outs, out_shapes):
        o.set_shape(shape)
    return outs


def _placeholder(dtype: tf.DType, shape: tf.TensorShape) -> np.ndarray:
    """Zeros standing in for a collective's output that failed (never seen: the op after it raises)."""
    dims = [] if shape.rank is None else [d if d is not None else 0 for d in shape.as_list()]
    return np.zeros(dims, dtype=dtype.as_numpy_dtype)


def _differentiable(forward: Callable[[List[tf.Tensor]], List[tf.Tensor]],
                    backward: Callable[[List[tf.Tensor], List[tf.Tensor]], List[Any]],
                    tensors: List[tf.Tensor]) -> List[tf.Tensor]:
    """forward(tensors), differentiable through `backward(upstream, inputs)` (ddl_runtime.tensorflow's wrapper)."""
    return _with_gradient(forward, lambda dys, xs, ys: backward(dys, xs), tensors)


def _name(name: Optional[str], what: str) -> str:
    return f"{what}('{name}')" if name else what


def _run(kind: str, name: Optional[str], params: tuple, inputs: List[np.ndarray], outputs: List[Any],
         process_set: Any, what: str, extra: Any = None, group: bool = False) -> Any:
    """Submit one request to the process set's controller and wait for it (at graph run time)."""
    try:
        handle = _submit(kind, name, params, inputs, outputs, process_set, what, extra=extra, group=group)
        result = handle.wait()
    except DDLError as exc:  # Horovod's classes: tf.errors.FailedPreconditionError for a mismatch...
        raise as_tensorflow_error(exc) from None
    outputs[:] = handle.request.outputs  # allgather / alltoall allocate theirs when the request runs
    return result


# -- allreduce ----------------------------------------------------------------------------------
def _reduce(tensors: List[tf.Tensor], name: Optional[str], op_name: str, pre: float, post: float,
            process_set: Any, what: str, group: bool, request: Optional[str] = None) -> List[tf.Tensor]:
    """`name`: the user's (gradients are named after it); `request`: the name negotiated (naming.py)."""
    request = request if request is not None else request_name(name, "allreduce")

    def core(arrays):  # out of place: TensorFlow's buffers are read, results land where the engine picks
        outputs: List[Any] = [None] * len(arrays)
        _run("allreduce", request, (op_name, pre, post), arrays, outputs, process_set, what, group=group)
        return outputs

    core = timed_gradient_step(core)   # a DistributedGradientTape's reduction: a step (core/stats.py)

    def forward(ts):
        return _bridge(core, ts, [t.dtype for t in ts], [t.shape for t in ts], what, host=_readonly)

    def backward(dys, xs):
        if op_name in ("sum", "average"):
            grad_name = f"{name}.grad" if name else None
            return _reduce(dys, grad_name, op_name, pre, post, process_set, what, group)
        ys = forward(xs)  # min/max/product: the gradient flows where this rank's value is the result
        return [d * tf.cast(tf.equal(x, y), d.dtype) for d, x, y in zip(dys, xs, ys)]

    return _differentiable(forward, backward, tensors)


def _sparse_allreduce(tensor: tf.IndexedSlices, name: Optional[str], op_name: str, process_set: Any) -> tf.IndexedSlices:
    """Horovod's rule for IndexedSlices: gather every rank's values and indices (Average divides)."""
    if op_name not in ("sum", "average"):
        raise NotImplementedError("allreduce: IndexedSlices support op=hvd.Average or hvd.Sum only")
    values = allgather(tensor.values, name=f"{name}.values" if name else None, process_set=process_set)
    indices = allgather(tensor.indices, name=f"{name}.indices" if name else None, process_set=process_set)
    if op_name == "average":
        values = values / tf.cast(controller_for(process_set, "allreduce").size, values.dtype)
    return tf.IndexedSlices(values, indices, dense_shape=tensor.dense_shape)


def allreduce(tensor, average=None, device_dense='', device_sparse='', compression=Compression.none, op=None,
              prescale_factor=1.0, postscale_factor=1.0, name=None, process_set=global_process_set,
              ignore_name_scope=False):
    """Reduce `tensor` over the ranks of `process_set` (default op: Average); returns a new tensor.

    op: hvd.Average, Sum, Min, Max, Product (Adasum is refused).  Integer averages are
    truncated toward zero.  tf.IndexedSlices are gathered, as Horovod does.  Differentiable.
    """
    what = _name(name, "allreduce")
    if isinstance(tensor, tf.IndexedSlices):
        op_name = _sparse_op(op, average, prescale_factor, postscale_factor, what)
        return _sparse_allreduce(tensor, name, op_name, process_set)
    request = request_name(name, "allreduce")
    with refusing("allreduce", request, process_set):
        op_name = reduce_op(op, average, what)
        pre, post = _scales(prescale_factor, postscale_factor, what)
        t = _check(tensor, what, reduce=True)
    sent, ctx = (compression or Compression.none).compress(t)
    out = _reduce([sent], name, op_name, pre, post, process_set, what, group=False, request=request)[0]
    return (compression or Compression.none).decompress(out, ctx)


def _sparse_op(op, average, prescale_factor, postscale_factor, what: str) -> str:
    """Horovod's limits for tf.IndexedSlices: Average or Sum, no scale factors (NotImplementedError)."""
    if op == Adasum:
        raise NotImplementedError(f"{what}: op=Adasum is not supported for tf.IndexedSlices")
    op_name = reduce_op(op, average, what)
    if op_name not in ("sum", "average"):
        raise NotImplementedError(f"{what}: tf.IndexedSlices support op=hvd.Average or hvd.Sum only, not {op_name}")
    if float(prescale_factor) != 1.0 or float(postscale_factor) != 1.0:
        raise NotImplementedError(f"{what}: prescale_factor and postscale_factor are not supported for "
                                  "tf.IndexedSlices")
    return op_name


def grouped_allreduce(tensors, average=None, device_dense='', device_sparse='', compression=Compression.none,
                      op=None, prescale_factor=1.0, postscale_factor=1.0, name=None,
                      process_set=global_process_set, ignore_name_scope=False):
    """Reduce a list of tensors as one negotiated, fused operation; returns the list of results."""
    what = _name(name, "grouped_allreduce")
    tensors = _as_list(tensors, what)
    if not tensors:
        return []
    sparse = [i for i, t in enumerate(tensors) if isinstance(t, tf.IndexedSlices)]
    if sparse:  # Horovod: tf.IndexedSlices are gathered, one by one, beside the dense group
        _sparse_op(op, average, prescale_factor, postscale_factor, what)
    request = request_name(name, "allreduce")
    with refusing("allreduce", request, process_set):
        op_name = reduce_op(op, average, what)
        pre, post = _scales(prescale_factor, postscale_factor, what)
        dense = [i for i in range(len(tensors)) if i not in sparse]
        checked = [_check(tensors[i], what, reduce=True) for i in dense]
    results: List[Any] = [None] * len(tensors)
    for i in sparse:
        results[i] = _sparse_allreduce(tensors[i], f"{name}.{i}" if name else None, op_name, process_set)
    if dense:
        compression = compression or Compression.none
        pairs = [compression.compress(t) for t in checked]
        outs = _reduce([p[0] for p in pairs], name, op_name, pre, post, process_set, what, group=True,
                       request=request)
        for i, o, (_, c) in zip(dense, outs, pairs):
            results[i] = compression.decompress(o, c)
    return results


def _as_list(tensors: Any, what: str) -> list:
    if not isinstance(tensors, (list, tuple)):
        raise DDLInputError(f"{what}: expected a list of tensors, got {type(tensors).__name__}")
    return list(tensors)


# -- allgather ----------------------------------------------------------------------------------
def _gather(tensors: List[tf.Tensor], name: Optional[str], process_set: Any, what: str,
            group: bool, request: Optional[str] = None) -> List[tf.Tensor]:
    tensors = [tf.reshape(t, [1]) if t.shape.rank == 0 else t for t in tensors]  # a scalar counts as (1,)
    request = request if request is not None else request_name(name, "allgather")

    def core(arrays):
        outs: List[Any] = [None] * len(arrays)
        _run("allgather", request, (), arrays, outs, process_set, what, group=group)
        return outs

    def forward(ts):
        shapes = [tf.TensorShape([None]).concatenate(t.shape[1:]) for t in ts]
        return _bridge(core, ts, [t.dtype for t in ts], shapes, what)

    def backward(dys, xs):  # Horovod's rule: this rank's rows of the averaged gradient
        averaged = _reduce(dys, f"{name}.grad" if name else None, "average", 1.0, 1.0, process_set, what, group)
        ctl = controller_for(process_set, what)
        out = []
        for s, x in zip(averaged, xs):
            rows = tf.reshape(tf.shape(x, out_type=tf.int64)[0], [1])
            counts = _gather([rows], f"{name}.grad_rows" if name else None, process_set, what, False)[0]
            start = tf.reduce_sum(counts[:ctl.rank])
            out.append(tf.reshape(s[start:start + counts[ctl.rank]], tf.shape(x)))
        return out

    return _differentiable(forward, backward, tensors)


def allgather(tensor, name=None, process_set=global_process_set, ignore_name_scope=False):
    """Every rank's `tensor` concatenated along the first dimension (first dimensions may differ)."""
    what = _name(name, "allgather")
    request = request_name(name, "allgather")
    with refusing("allgather", request, process_set):
        t = _check(tensor, what, reduce=False)
    return _gather([t], name, process_set, what, group=False, request=request)[0]


def grouped_allgather(tensors, name=None, process_set=global_process_set, ignore_name_scope=False):
    """allgather of each tensor in the list, negotiated as one operation."""
    what = _name(name, "grouped_allgather")
    tensors = _as_list(tensors, what)
    if not tensors:
        return []
    request = request_name(name, "allgather")
    with refusing("allgather", request, process_set):
        tensors = [_check(t, what, reduce=False) for t in tensors]
    return _gather(tensors, name, process_set, what, group=True, request=request)


# -- broadcast ----------------------------------------------------------------------------------
def _check_root(root_rank: Any, process_set: Any, what: str) -> int:
    """`root_rank` is the root's rank in the job (as in Horovod), which must be in the process set."""
    ctl = controller_for(process_set, what)
    if not isinstance(root_rank, (int, np.integer)) or isinstance(root_rank, bool) or \
            int(root_rank) not in ctl.global_ranks:
        members = ctl.global_ranks if len(ctl.global_ranks) <= 16 else f"size {ctl.size}"
        raise DDLInputError(f"{what}: root_rank {root_rank!r} is not a rank of the process set ({members})")
    return int(root_rank)


def broadcast(tensor, root_rank, name=None, process_set=global_process_set, ignore_name_scope=False):
    """`root_rank`'s value of `tensor` on every rank (a new tensor).  Differentiable."""
    what = _name(name, "broadcast")
    request = request_name(name, "broadcast")
    with refusing("broadcast", request, process_set):
        root = _check_root(root_rank, process_set, what)
        t = _check(tensor, what, reduce=False)

    def core(arrays):
        _run("broadcast", request, (root,), arrays, arrays, process_set, what)
        return arrays

    def forward(ts):
        return _bridge(core, ts, [t.dtype for t in ts], [t.shape for t in ts], what)

    def backward(dys, xs):  # Horovod's rule: the averaged gradient on the root, zeros elsewhere
        averaged = _reduce(dys, f"{name}.grad" if name else None, "average", 1.0, 1.0, process_set, what, False)
        ctl = controller_for(process_set, what)
        me = ctl.global_ranks[ctl.rank]  # root is a rank of the job
        return [g if me == root else g * 0 for g in averaged]  # `* 0`, not zeros_like: a graph still runs it

    return _differentiable(forward, backward, [t])[0]


def broadcast_(variables, root_rank, name=None, process_set=global_process_set):
    """Assign `root_rank`'s values to the variables (tf.Variable, resource or TensorFlow 1 ref
    variables) in place.  Eagerly returns the variables; in a graph, tensors of the broadcast values
    that run the broadcast and the assignment when evaluated."""
    variables = list(variables) if isinstance(variables, (list, tuple)) else [variables]
    out = []
    for i, v in enumerate(variables):
        value = broadcast(v, root_rank, name=f"{name}.{i}" if name else None, process_set=process_set)
        assigned = v.assign(value)
        if tf.executing_eagerly():
            out.append(v)
            continue
        with tf.control_dependencies([assigned]):
            out.append(tf.identity(value))
    return out


# -- alltoall -----------------------------------------------------------------------------------
def alltoall(tensor, splits=None, name=None, ignore_name_scope=False, process_set=global_process_set):
    """Send splits[i] rows of `tensor` to rank i (equal parts when splits is None); returns the rows
    received (in rank order) and the int32 tensor of how many came from each rank.  Differentiable."""
    what = _name(name, "alltoall")
    check_known(process_set, what)  # a ValueError, as Horovod, before the set's controller is asked for
    ctl = controller_for(process_set, what)
    request = request_name(name, "alltoall")

    def send_rows(first: int, split_values: Optional[np.ndarray]) -> List[int]:
        send = None if split_values is None else [int(v) for v in split_values.reshape(-1)]
        return alltoall_send_rows(first, send, ctl.size, what)

    with refusing("alltoall", request, process_set):
        t = _check(tensor, what, reduce=False)
        if t.shape.rank == 0:
            raise DDLInputError(f"{what}: alltoall needs a tensor with at least one dimension")
        if splits is None:
            split_t = None
        else:
            split_t = tf.convert_to_tensor(splits)
            if split_t.dtype not in (tf.int32, tf.int64):
                raise DDLInputError(f"{what}: splits must be int32 (a list of ints or an int32 tensor), got "
                                    f"{split_t.dtype.name}")
            split_t = tf.cast(tf.reshape(split_t, [-1]), tf.int32)
        if tf.executing_eagerly() and split_t is not None:
            send_rows(int(t.shape[0]), split_t.numpy())  # bad splits: a clear error before anything is sent

    def core(arrays):
        with refusing("alltoall", request, process_set):  # splits known only now (a graph)
            send = send_rows(arrays[0].shape[0], arrays[1] if len(arrays) > 1 else None)
        outs: List[Any] = [None]
        received = _run("alltoall", request, (), [arrays[0]], outs, process_set, what, extra=tuple(send))
        return [outs[0], np.asarray(received, dtype=np.int32)]

    def forward(ts):
        inputs = ts + ([split_t] if split_t is not None else [])
        shape = tf.TensorShape([None]).concatenate(ts[0].shape[1:])
        return _bridge(core, inputs, [ts[0].dtype, tf.int32], [shape, tf.TensorShape([ctl.size])], what)

    if not t.dtype.is_floating:
        out, received = forward([t])
    else:
        holder = {}

        @tf.custom_gradient
        def op(x):
            y, rec = forward([x])
            holder["received"] = rec

            def grad(dy, *_):
                back = alltoall(dy, splits=holder["received"], name=f"{name}.grad" if name else None,
                                process_set=process_set)
                return back[0]
            return (y, rec), grad

        out, received = op(t)
    return (out, received) if splits is not None else out


# -- reducescatter ------------------------------------------------------------------------------
def _scatter(tensors: List[tf.Tensor], name: Optional[str], op_name: str, pre: float, post: float,
             process_set: Any, what: str, group: bool, request: Optional[str] = None) -> List[tf.Tensor]:
    ctl = controller_for(process_set, what)
    request = request if request is not None else request_name(name, "reducescatter")

    def core(arrays):
        outs = [np.empty((scatter_rows(a.shape[0], ctl.size)[ctl.rank],) + a.shape[1:], dtype=a.dtype)
                for a in arrays]
        _run("reducescatter", request, (op_name, pre, post), arrays, outs, process_set, what, group=group)
        return outs

    def forward(ts):
        shapes = []
        for t in ts:
            first = t.shape[0]
            rows = scatter_rows(int(first), ctl.size)[ctl.rank] if first is not None else None
            shapes.append(tf.TensorShape([rows]).concatenate(t.shape[1:]))
        return _bridge(core, ts, [t.dtype for t in ts], shapes, what)

    def backward(dys, xs):
        # Horovod's rule (as horovod.torch here): the gathered gradient, times size for Sum
        grads = _gather(dys, f"{name}.grad" if name else None, process_set, what, group)
        if op_name == "sum":
            grads = [g * tf.cast(ctl.size, g.dtype) for g in grads]
        return grads

    return _differentiable(forward, backward, tensors)


def reducescatter(tensor, device_dense='', compression=Compression.none, op=Average, name=None,
                  process_set=global_process_set, ignore_name_scope=False, prescale_factor=1.0,
                  postscale_factor=1.0):
    """Reduce `tensor` over the ranks and return this rank's block of the first dimension
    (the first ``n % size`` ranks get one row more).  op: hvd.Average or hvd.Sum."""
    what = _name(name, "reducescatter")
    request = request_name(name, "reducescatter")
    with refusing("reducescatter", request, process_set):
        op_name, pre, post, (t,) = _scatter_inputs([tensor], op, prescale_factor, postscale_factor, what)
    compression = compression or Compression.none
    sent, ctx = compression.compress(t)
    out = _scatter([sent], name, op_name, pre, post, process_set, what, group=False, request=request)[0]
    return compression.decompress(out, ctx)


def _scatter_inputs(tensors: list, op, prescale_factor, postscale_factor, what: str):
    """reducescatter's checks: (op name, prescale, postscale, checked tensors), or one clear error."""
    op_name = reduce_op(op, None, what)
    if op_name not in ("average", "sum"):
        raise DDLInputError(f"{what}: reducescatter supports op=hvd.Average or hvd.Sum")
    pre, post = _scales(prescale_factor, postscale_factor, what)
    checked = [_check(t, what, reduce=True) for t in tensors]
    if any(t.shape.rank == 0 for t in checked):
        raise DDLInputError(f"{what}: reducescatter needs a tensor with at least one dimension, got a scalar")
    return op_name, pre, post, checked


def grouped_reducescatter(tensors, device_dense='', compression=Compression.none, op=Average, name=None,
                          process_set=global_process_set, ignore_name_scope=False, prescale_factor=1.0,
                          postscale_factor=1.0):
    """reducescatter of each tensor in the list, negotiated as one operation."""
    what = _name(name, "grouped_reducescatter")
    tensors = _as_list(tensors, what)
    if not tensors:
        return []
    request = request_name(name, "reducescatter")
    with refusing("reducescatter", request, process_set):
        op_name, pre, post, checked = _scatter_inputs(tensors, op, prescale_factor, postscale_factor, what)
    compression = compression or Compression.none
    pairs = [compression.compress(t) for t in checked]
    outs = _scatter([p[0] for p in pairs], name, op_name, pre, post, process_set, what, group=True,
                    request=request)
    return [compression.decompress(o, c) for o, (_, c) in zip(outs, pairs)]


# -- join and barrier ---------------------------------------------------------------------------
def join() -> int:
    """Wait until every rank has joined (joined ranks contribute zeros to the others' allreduces);
    returns the rank that joined last."""
    ctl = controller_for(global_process_set, "join")
    return ctl.submit(Request("join", "join", (), [])).wait()


def barrier(process_set=global_process_set) -> None:
    """Wait until every rank of the process set arrives."""
    ctl = controller_for(process_set, "barrier")
    ctl.submit(Request("barrier", ctl.auto_name("barrier"), (), [])).wait()


# -- rank and size as ops -----------------------------------------------------------------------
def _query_op(value: Callable[[], int], name: Optional[str]) -> tf.Tensor:
    """An int32 scalar op whose value is read when it runs (Horovod's *_op: a graph may be built before init)."""
    out = tf.numpy_function(lambda: np.int32(value()), [], tf.int32, stateful=False, name=name or "hvd_query")
    out.set_shape([])
    return out


def rank_op(name=None):
    """This process's rank, as an op."""
    return _query_op(lambda: controller_for(global_process_set, "rank_op").rank, name)


def size_op(process_set_id=0, name=None):
    """The number of processes (of the process set), as an op."""
    return _query_op(lambda: _set_by_id(process_set_id, "size_op").size(), name)


def local_rank_op(name=None):
    """This process's rank within its node, as an op."""
    return _query_op(local_rank, name)


def local_size_op(name=None):
    """The number of processes on this process's node, as an op."""
    return _query_op(local_size, name)


def process_set_included_op(process_set_id=0, name=None):
    """1 if this process belongs to the process set, else 0, as an op."""
    return _query_op(lambda: int(bool(_set_by_id(process_set_id, "process_set_included_op").included())), name)


def _set_by_id(process_set_id: int, what: str):
    from ..common.process_sets import _registered

    process_set = _registered.get(int(process_set_id))
    if process_set is None:
        raise DDLInputError(f"{what}: process set {process_set_id} is not registered")
    return process_set
