"""Turning user objects (numpy arrays, torch CPU tensors, Python numbers) into flat numpy views.

A `TensorRef` is a 1-D numpy view over the user's own memory, so reductions write in place.
bfloat16 has no numpy or MPI type: its bits are viewed as uint16, and reductions run in
float32 (`widen` converts into a float32 scratch buffer, `narrow` rounds back to nearest-even).
float16 is reduced in float32 the same way (one rounding at the end instead of one per add).
torch is never imported here: a tensor's own module is used, and only when one is passed.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from ..errors import DDLInputError

SUPPORTED_DTYPES = ("float16", "bfloat16", "float32", "float64", "int32", "int64")
FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64")
# dtypes reduced in a wider type (the wire/reduction dtype)
WIDENED = {"float16": np.dtype(np.float32), "bfloat16": np.dtype(np.float32)}
# dtypes whose raw bits are moved as this numpy dtype when nothing is reduced
RAW_VIEW = {"bfloat16": np.dtype(np.uint16)}


@dataclass(slots=True)
class TensorRef:
    """One user tensor: its name, logical dtype and a flat numpy view of its memory."""

    obj: Any
    name: str
    dtype: str  # one of SUPPORTED_DTYPES
    shape: tuple
    flat: np.ndarray  # 1-D view of the user's memory (uint16 bits for bfloat16)
    kind: str  # "numpy", "torch" or "scalar"
    device: str = "cpu"
    out: Optional[np.ndarray] = None  # out-of-place: results go here (same layout as flat), flat is only read
    index: Optional[int] = None  # the device index of a tensor off the CPU (cuda:1 -> 1)

    @property
    def dst(self) -> np.ndarray:
        """Where results are written: `out` when set, else the tensor's own memory."""
        return self.flat if self.out is None else self.out

    @property
    def numel(self) -> int:
        return self.flat.size

    @property
    def nbytes(self) -> int:
        return self.flat.nbytes

    @property
    def reduce_dtype(self) -> np.dtype:
        """The numpy dtype the reduction runs in."""
        return WIDENED.get(self.dtype, self.flat.dtype)

    @property
    def widened(self) -> bool:
        return self.dtype in WIDENED


def is_torch_tensor(obj: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(obj, torch.Tensor)


def as_tensor(obj: Any, name: str, *, writable: bool = True, allow_scalar: bool = False) -> TensorRef:
    """Validate `obj` and view it flat; raises DDLInputError naming the tensor."""
    if isinstance(obj, np.ndarray):
        return _from_numpy(obj, name, writable)
    if is_torch_tensor(obj):
        return _from_torch(obj, name, writable)
    if allow_scalar and isinstance(obj, (int, float, np.integer, np.floating)) and not isinstance(obj, bool):
        arr = np.array([obj], dtype=np.float64 if isinstance(obj, (float, np.floating)) else np.int64)
        return TensorRef(obj, name, arr.dtype.name, (), arr, "scalar")
    raise DDLInputError(
        f"tensor '{name}' is a {type(obj).__module__}.{type(obj).__qualname__}; "
        "expected a numpy array or a torch tensor"
    )


def _check_dtype(dtype_name: str, name: str) -> None:
    if dtype_name not in SUPPORTED_DTYPES:
        raise DDLInputError(
            f"tensor '{name}' has unsupported dtype {dtype_name}; supported: {', '.join(SUPPORTED_DTYPES)}"
        )


_dtype_names: dict = {}


def _dtype_name(dtype: np.dtype) -> str:
    name = _dtype_names.get(dtype)
    if name is None:
        name = _dtype_names[dtype] = dtype.name  # numpy computes .name on every access
    return name


def _from_numpy(arr: np.ndarray, name: str, writable: bool) -> TensorRef:
    dtype_name = _dtype_name(arr.dtype)
    _check_dtype(dtype_name, name)
    flags = arr.flags
    if not flags.c_contiguous:
        raise DDLInputError(f"tensor '{name}' is not contiguous (strides {arr.strides}); pass np.ascontiguousarray(x)")
    if writable and not flags.writeable:
        raise DDLInputError(f"tensor '{name}' is read-only; results are written in place, pass a writable copy")
    view = arr.view(RAW_VIEW[dtype_name]) if dtype_name in RAW_VIEW else arr
    return TensorRef(arr, name, dtype_name, arr.shape, view.ravel(), "numpy")  # contiguous: ravel is a view


_torch_dtype_names: dict = {}


def _from_torch(t: Any, name: str, writable: bool) -> TensorRef:
    torch = sys.modules["torch"]
    dtype_name = _torch_dtype_names.get(t.dtype)
    if dtype_name is None:
        dtype_name = _torch_dtype_names[t.dtype] = str(t.dtype).replace("torch.", "")
    _check_dtype(dtype_name, name)
    if t.layout != torch.strided:
        raise DDLInputError(f"tensor '{name}' has layout {t.layout}; only dense (strided) tensors are supported")
    if not t.is_contiguous():
        raise DDLInputError(f"tensor '{name}' is not contiguous (strides {tuple(t.stride())}); pass x.contiguous()")
    if t.is_conj() or t.is_neg():
        raise DDLInputError(f"tensor '{name}' has a pending conj/neg bit; call x.resolve_conj().resolve_neg()")
    if writable and t.is_inference() and not torch.is_inference_mode_enabled():
        raise DDLInputError(f"tensor '{name}' is an inference tensor and cannot be written in place")
    if not t.is_cpu:
        # GPU tensors take the device path (ddl_runtime.transports.gpu); no numpy view exists.
        return TensorRef(t, name, dtype_name, tuple(t.shape), None, "torch", t.device.type, index=t.device.index)
    d = t.detach() if t.requires_grad else t  # a gradient needs no detach (half of this call's cost)
    if dtype_name == "bfloat16":
        flat = d.view(torch.int16).numpy().view(np.uint16).reshape(-1)
    else:
        flat = d.numpy().reshape(-1)  # contiguous: a view; numpy's reshape costs a quarter of torch's
    return TensorRef(t, name, dtype_name, tuple(t.shape), flat, "torch")


def widen(src: np.ndarray, dtype: str, out: np.ndarray) -> None:
    """Copy float16 / bfloat16-bits `src` into the float32 array `out`."""
    if dtype == "bfloat16":
        bits = out.view(np.uint32)
        np.copyto(bits, src, casting="unsafe")
        bits <<= 16
    else:
        np.copyto(out, src, casting="unsafe")


def narrow(src: np.ndarray, dtype: str, out: np.ndarray, scale: Optional[float] = None) -> None:
    """Round the float32 array `src` into `out` (float16, or bfloat16 bits); optionally divide first."""
    if scale is not None:
        src = src / scale
    if dtype == "bfloat16":
        bits = src.view(np.uint32)
        rounded = (bits >> 16) & 1
        rounded += 0x7FFF
        rounded += bits
        rounded >>= 16
        np.copyto(out, rounded, casting="unsafe")
        nan = np.isnan(src)
        if nan.any():
            out[nan] = 0x7FC0
    else:
        np.copyto(out, src, casting="unsafe")


def store_result(ref: TensorRef, src: np.ndarray, dst: np.ndarray, scale: Optional[float]) -> None:
    """A reduced run into the user's tensor: round back (16-bit floats), divide (avg) or copy."""
    if ref.widened:
        narrow(src, ref.dtype, dst, scale)
    elif scale is not None:
        np.divide(src, scale, out=dst)
    else:
        np.copyto(dst, src)


def new_like(ref: TensorRef, flat: np.ndarray, shape: tuple) -> Any:
    """Wrap a freshly allocated flat numpy array (in `ref`'s raw dtype) as the same kind of object."""
    if ref.kind == "torch":
        torch = sys.modules["torch"]
        if ref.dtype == "bfloat16":
            return torch.from_numpy(flat.view(np.int16)).view(torch.bfloat16).reshape(shape)
        return torch.from_numpy(flat).reshape(shape)
    if ref.dtype in RAW_VIEW:
        return flat.view(ref.obj.dtype).reshape(shape)
    return flat.reshape(shape)
