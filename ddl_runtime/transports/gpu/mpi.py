"""CUDA-aware MPI pass-through (`DDL_CUDA_AWARE_MPI=1`): device buffers go straight to MPI.

Set it when the site's MPI is CUDA-aware (e.g. Spectrum MPI with `jsrun --smpiargs="-gpu"`).
One in-place allreduce per tensor for float32/float64/int32/int64; other dtypes (16-bit floats:
MPI cannot reduce them) take the job's transport (transport.py).
"""
from __future__ import annotations

import os
import sys
from typing import Sequence

from mpi4py import MPI

from ...engine.algorithms import MPI_OPS
from ...engine.buffers import TensorRef

MPI_CUDA_TYPES = {"float32": MPI.FLOAT, "float64": MPI.DOUBLE, "int32": MPI.INT32_T, "int64": MPI.INT64_T}


def enabled() -> bool:
    return os.environ.get("DDL_CUDA_AWARE_MPI", "").lower() in ("1", "true", "yes")


def takes(refs: Sequence[TensorRef]) -> bool:
    return enabled() and all(r.dtype in MPI_CUDA_TYPES for r in refs)


def allreduce(rt, refs: Sequence[TensorRef], op: str) -> None:
    torch = sys.modules["torch"]
    for ref in refs:
        flat = ref.obj.detach().view(-1)
        if flat.numel():
            torch.cuda.current_stream().synchronize()
            request = rt.algorithms.flat.Iallreduce(MPI.IN_PLACE, [flat, MPI_CUDA_TYPES[ref.dtype]], MPI_OPS[op])
            rt.engine.wait_request(request)
            if op == "avg":
                flat.div_(rt.size)


def bcast(rt, refs: Sequence[TensorRef], root: int) -> None:
    torch = sys.modules["torch"]
    torch.cuda.current_stream().synchronize()
    for ref in refs:
        flat = ref.obj.detach().view(-1).view(torch.uint8)
        rt.engine.wait_request(rt.control.Ibcast([flat, MPI.BYTE], root=root))
