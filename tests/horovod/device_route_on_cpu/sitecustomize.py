"""On PYTHONPATH with DDL_TEST_DEVICE_ROUTE_ON_CPU=1: horovod.torch's CPU tensors take the device route
(the NCCL transport's code) through a gloo group, so that Horovod's own test_torch.py runs it on a
machine without a GPU (tests/horovod/test_torch_device_route_suite.py).  Every runtime init makes
the gloo group the way the runtime bootstraps NCCL, sets the job's transport to NCCL and lets the
route take CPU tensors.  Does nothing in other processes (ddlrun's rank shims among them)."""
import importlib.abc
import importlib.machinery
import os
import sys


def _patch(runtime) -> None:
    real_init = runtime.init

    def init(*args, **kwargs):
        out = real_init(*args, **kwargs)
        from ddl_runtime.gpu import nccl
        from ddl_runtime.gpu.transport import Transport, state
        from ddl_runtime.horovod.torch import device_route
        rt = runtime.current()
        nccl.process_group(rt, backend="gloo")
        if state(rt).transport is None:
            state(rt).transport = Transport("nccl", "device route on CPU (test)")
        device_route.DEVICES.add("cpu")
        return out
    runtime.init = init


class _Finder(importlib.abc.MetaPathFinder):
    """Patches ddl_runtime.runtime once it is imported (importing it here would start MPI in every
    Python process, ddlrun's shims included)."""

    def find_spec(self, name, path, target=None):
        if name != "ddl_runtime.runtime":
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        real_exec = spec.loader.exec_module

        def exec_module(module):
            real_exec(module)
            _patch(module)
        spec.loader.exec_module = exec_module
        return spec


if os.environ.get("DDL_TEST_DEVICE_ROUTE_ON_CPU") == "1":
    sys.meta_path.insert(0, _Finder())
