"""Gradient compression for TensorFlow tensors: Horovod's ``Compression.none`` / ``Compression.fp16``.

``compress(tensor)`` returns ``(tensor_to_send, ctx)``; ``decompress(tensor, ctx)`` restores the
original dtype.  fp16 casts floating-point tensors (float32, float64, bfloat16) to float16 for
the reduction and back afterwards; other dtypes pass through.  Both work eagerly and inside
``tf.function`` (they are plain ``tf.cast``s).
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Optional, Tuple

import tensorflow as tf

__all__ = ["Compressor", "NoneCompressor", "FP16Compressor", "Compression"]


class Compressor(ABC):
    """Interface: compress before the collective, decompress after it."""

    @staticmethod
    @abstractmethod
    def compress(tensor: Any) -> Tuple[Any, Optional[Any]]:
        """Return the tensor to send and what decompress needs to undo it."""

    @staticmethod
    @abstractmethod
    def decompress(tensor: Any, ctx: Optional[Any]) -> Any:
        """Undo compress on the collective's result."""


class NoneCompressor(Compressor):
    """Send tensors as they are."""

    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


class FP16Compressor(Compressor):
    """Send floating-point tensors as float16 (half the bytes), restore their dtype after."""

    @staticmethod
    def compress(tensor):
        dtype = tensor.dtype
        if dtype.is_floating and dtype != tf.float16:
            return tf.cast(tensor, tf.float16), dtype
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor if ctx is None else tf.cast(tensor, ctx)


class Compression:
    """The compression algorithms a collective or DistributedOptimizer accepts."""

    none = NoneCompressor
    fp16 = FP16Compressor
