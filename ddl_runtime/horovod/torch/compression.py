"""Gradient compression for the Horovod torch layer: ``hvd.Compression.none`` / ``.fp16``.

A compressor turns a tensor into what travels (``compress(t) -> (wire, ctx)``) and back
(``decompress(wire, ctx) -> t``).  ``fp16`` rounds floating-point tensors to float16 before the
reduction and restores the original dtype after it; other dtypes pass unchanged.  (ddl_runtime
reduces 16-bit floats in float32 internally, so fp16 here reproduces Horovod's rounding; it does
not halve the bytes on the wire.)
"""
from __future__ import annotations

from typing import Any, Tuple

import torch

__all__ = ["Compressor", "NoneCompressor", "FP16Compressor", "Compression"]


class Compressor:
    """Interface: subclass and override both static methods to write your own."""

    @staticmethod
    def compress(tensor: torch.Tensor) -> Tuple[torch.Tensor, Any]:
        raise NotImplementedError("Compressor.compress")

    @staticmethod
    def decompress(tensor: torch.Tensor, ctx: Any) -> torch.Tensor:
        raise NotImplementedError("Compressor.decompress")


class NoneCompressor(Compressor):
    """No compression: the tensor travels as it is."""

    @staticmethod
    def compress(tensor: torch.Tensor) -> Tuple[torch.Tensor, Any]:
        return tensor, None

    @staticmethod
    def decompress(tensor: torch.Tensor, ctx: Any) -> torch.Tensor:
        return tensor


class FP16Compressor(Compressor):
    """Floating-point tensors travel as float16; everything else unchanged."""

    @staticmethod
    def compress(tensor: torch.Tensor) -> Tuple[torch.Tensor, Any]:
        if tensor.dtype.is_floating_point and tensor.dtype != torch.float16:
            return tensor.to(torch.float16), tensor.dtype
        return tensor, None

    @staticmethod
    def decompress(tensor: torch.Tensor, ctx: Any) -> torch.Tensor:
        return tensor.to(ctx) if ctx is not None else tensor


class Compression:
    """The compressors Horovod offers: ``Compression.none`` and ``Compression.fp16``."""

    none = NoneCompressor
    fp16 = FP16Compressor
