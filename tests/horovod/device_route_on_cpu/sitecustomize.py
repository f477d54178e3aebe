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
        from ddl_runtime.transports.gpu import nccl
        from ddl_runtime.transports.gpu.transport import Transport, state
        from ddl_runtime.horovod.torch import device_route
        rt = runtime.current()
        nccl.process_group(rt, backend="gloo")
        if state(rt).transport is None:
            state(rt).transport = Transport("nccl", "device route on CPU (test)")
        device_route.DEVICES.add("cpu")
        _count_posts()
        return out
    runtime.init = init


_posts = {"allreduce": 0}


def _count_posts() -> None:
    """Count the collectives the device route ran (printed at exit: the test checks the route ran)."""
    from ddl_runtime.collectives import negotiated_device
    from ddl_runtime.transports.gpu import nccl
    if getattr(negotiated_device.post, "counted", False):
        return
    real_post, real_allreduce = negotiated_device.post, nccl.allreduce_start

    def post(ctl, kind, entry, handle):
        _posts[kind] = _posts.get(kind, 0) + 1
        return real_post(ctl, kind, entry, handle)

    def allreduce_start(*args, **kwargs):
        _posts["allreduce"] += 1
        return real_allreduce(*args, **kwargs)
    post.counted = True
    negotiated_device.post, nccl.allreduce_start = post, allreduce_start
    import atexit
    atexit.register(lambda: print(f"DEVICE_ROUTE_POSTS {sorted(_posts.items())}", flush=True))


class _Finder(importlib.abc.MetaPathFinder):
    """Patches ddl_runtime.state.runtime once it is imported (importing it here would start MPI in every
    Python process, ddlrun's shims included)."""

    def find_spec(self, name, path, target=None):
        if name != "ddl_runtime.state.runtime":
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
