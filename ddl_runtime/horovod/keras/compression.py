"""Gradient compression for Keras 3 tensors of any backend: ``Compression.none`` / ``Compression.fp16``.

The same interface as ``horovod.tensorflow.Compression`` and ``horovod.torch.Compression``
(``compress(t) -> (t, ctx)``, ``decompress(t, ctx)``), written with ``keras.ops`` so it works on
TensorFlow tensors (also inside a compiled step) and torch tensors alike.  Any of the three can
be passed to :func:`ddl_runtime.horovod.keras.DistributedOptimizer`.
"""
from __future__ import annotations

from typing import Any, Optional, Tuple

import keras

__all__ = ["NoneCompressor", "FP16Compressor", "Compression"]


class NoneCompressor:
    """Send tensors as they are."""

    @staticmethod
    def compress(tensor: Any) -> Tuple[Any, Optional[str]]:
        return tensor, None

    @staticmethod
    def decompress(tensor: Any, ctx: Optional[str]) -> Any:
        return tensor


class FP16Compressor:
    """Send floating-point tensors as float16 (half the bytes); restore their dtype after."""

    @staticmethod
    def compress(tensor: Any) -> Tuple[Any, Optional[str]]:
        dtype = keras.backend.standardize_dtype(tensor.dtype)
        if keras.backend.is_float_dtype(dtype) and dtype != "float16":
            return keras.ops.cast(tensor, "float16"), dtype
        return tensor, None

    @staticmethod
    def decompress(tensor: Any, ctx: Optional[str]) -> Any:
        return tensor if ctx is None else keras.ops.cast(tensor, ctx)


class Compression:
    """The compression algorithms DistributedOptimizer accepts."""

    none = NoneCompressor
    fp16 = FP16Compressor
