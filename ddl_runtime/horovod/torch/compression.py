"""Gradient compression for the Horovod torch layer: ``hvd.Compression.none`` / ``.fp16``.

A compressor turns a tensor into what travels (``compress(t) -> (wire, ctx)``) and back
(``decompress(wire, ctx) -> t``).  ``fp16`` rounds floating-point tensors to float16 before the
reduction and restores the original dtype after it; other dtypes pass unchanged.  (ddl_runtime
reduces 16-bit floats in float32 internally, so fp16 here reproduces Horovod's rounding; it does
not halve the bytes on the wire.)
"""
from __future__ import annotations

import abc
from typing import Any, Tuple

import torch

__all__ = ["Compressor", "NoneCompressor", "FP16Compressor", "Compression"]


class Compressor(abc.ABC):
    """The interface Horovod documents for custom compression (``hvd.Compression``): subclass it
    and define both static methods.  Abstract: a subclass that leaves one out gets a TypeError
    naming it when it is used (the two concrete compressors below are what ``compression=``
    takes)."""

    @staticmethod
    @abc.abstractmethod
    def compress(tensor: torch.Tensor) -> Tuple[torch.Tensor, Any]:
        """``tensor`` -> (what travels, context for decompress)."""
        raise TypeError("a compressor passed as compression= must define compress(); Compressor's is abstract")

    @staticmethod
    @abc.abstractmethod
    def decompress(tensor: torch.Tensor, ctx: Any) -> torch.Tensor:
        """(what travelled, context) -> the tensor in its original dtype."""
        raise TypeError("a compressor passed as compression= must define decompress(); Compressor's is abstract")


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
