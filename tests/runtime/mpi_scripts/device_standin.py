"""A CPU stand-in for a CUDA tensor, for the public helpers' tests (no GPU needed).

`OnDevice` behaves as a CUDA tensor does where host code touches it: `.numpy()` and
`np.asarray()` raise torch's own "can't convert cuda:0 device type tensor to numpy" TypeError,
while `.cpu()` / `.to("cpu")` (the device-to-host copy) give a plain CPU tensor, arithmetic keeps
it "on the device", `.item()` / `.tolist()` work, and `copy_` from a host tensor (host-to-device)
writes it.  A helper that reads a device tensor's memory as host memory fails here as it fails
on a GPU; one that copies it to the host first works on both.
"""
import torch

CUDA_NUMPY_ERROR = ("can't convert cuda:0 device type tensor to numpy. Use Tensor.cpu() to copy the tensor "
                    "to host memory first.")


def _is_host_move(func, args, kwargs) -> bool:
    if func is torch.Tensor.cpu:
        return True
    if func is torch.Tensor.to:
        target = kwargs.get("device", args[1] if len(args) > 1 else None)
        if isinstance(target, str):
            target = torch.device(target) if target not in ("cpu",) else torch.device("cpu")
        return isinstance(target, torch.device) and target.type == "cpu"
    return False


class OnDevice(torch.Tensor):
    """A tensor whose memory host code may not read directly (see the module docstring)."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if _is_host_move(func, args, kwargs):
            with torch._C.DisableTorchFunctionSubclass():
                return args[0].as_subclass(torch.Tensor).clone()
        return super().__torch_function__(func, types, args, kwargs)

    def numpy(self, *args, **kwargs):
        raise TypeError(CUDA_NUMPY_ERROR)

    def __array__(self, *args, **kwargs):
        raise TypeError(CUDA_NUMPY_ERROR)

    def __reduce_ex__(self, proto):  # pickled (torch.save) as a device tensor would be: refused here
        raise TypeError("a device tensor was serialised as it lies; copy it to the host first (.cpu())")


def on_device(t: torch.Tensor) -> OnDevice:
    return t.detach().clone().as_subclass(OnDevice)


def is_on_device(t) -> bool:
    return isinstance(t, OnDevice)


def stage_collectives(ddl) -> list:
    """Route `ddl`'s (the ddl_runtime package's) tensor collectives for OnDevice tensors through the
    host staging as the runtime does for CUDA tensors on the host transport (a device-to-host copy,
    the host collective, a host-to-device copy back), and refuse a group that mixes OnDevice and
    host tensors as the runtime refuses a mixed-device group.  Returns the calls' routes (for checks)."""
    from ddl_runtime.errors import DDLInputError
    routes = []

    def split(tensors, what):
        kinds = {is_on_device(t) for t in tensors if isinstance(t, torch.Tensor)}
        if len(kinds) > 1:
            raise DDLInputError(f"{what}: tensors of one call are on different devices")
        return kinds == {True}

    def wrap_inplace(fn, name):
        def staged(tensors, *args, **kwargs):
            many = isinstance(tensors, (list, tuple))
            group = list(tensors) if many else [tensors]
            if not split(group, name):
                routes.append((name, "host"))
                return fn(tensors, *args, **kwargs)
            routes.append((name, "staged"))
            hosts = [t.cpu() for t in group]
            fn(hosts if many else hosts[0], *args, **kwargs)
            for t, h in zip(group, hosts):
                t.copy_(h)
            return tensors
        return staged

    def allgather(x, *args, **kwargs):
        if not split([x], "allgather"):
            routes.append(("allgather", "host"))
            return real["allgather"](x, *args, **kwargs)
        routes.append(("allgather", "staged"))
        return on_device(torch.as_tensor(real["allgather"](x.cpu(), *args, **kwargs)))

    real = {n: getattr(ddl, n) for n in ("allreduce", "allreduce_n", "bcast", "allgather")}
    ddl.allreduce = wrap_inplace(real["allreduce"], "allreduce")
    ddl.allreduce_n = wrap_inplace(real["allreduce_n"], "allreduce_n")
    ddl.bcast = wrap_inplace(real["bcast"], "bcast")
    ddl.allgather = allgather
    return routes
