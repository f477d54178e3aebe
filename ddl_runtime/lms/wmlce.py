"""WML CE's LMS interface on a stock torch: ``torch.cuda.set_enabled_lms(bool)``,
``get_enabled_lms()``, ``set_limit_lms(bytes)``, ``get_limit_lms()``, ``set_size_lms(bytes)``,
``get_size_lms()``; defaults limit 0, size 1 MB, as in WML CE.

One change of meaning: WML CE's limit 0 swapped as early as it could; here 0 is all the memory
this process may use (the device, or the cap of ``torch.cuda.set_per_process_memory_fraction``,
shared out among ranks that share the GPU), so enabling LMS costs nothing where the model fits.

Enabled, LMS applies to every model as WML CE's did to every tensor: the outermost module with
parameters that runs a forward under autograd gets a Session (``ddl_runtime.lms.enable``) with
the limit and size set here.

``install()`` puts the functions on ``torch.cuda`` (and WML CE's TensorFlow switch,
``tf.config.experimental.set_lms_enabled``, on TensorFlow: one line saying wml's LMS is for
torch); ``install_when_imported()`` does it now or when torch / tensorflow are imported.
"""
from __future__ import annotations

import importlib.abc
import sys
import threading

from .config import SETTINGS

NAMES = ("set_enabled_lms", "get_enabled_lms", "set_limit_lms", "get_limit_lms", "set_size_lms", "get_size_lms")
TF_LINE = ("wml: Large Model Support is for torch only (torch.cuda.set_enabled_lms); "
           "TensorFlow runs without it")
_state = threading.local()
_hooks = []
_said_tf: list = []


def _bytes(name: str, value) -> int:
    from .session import LmsError

    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise LmsError(f"torch.cuda.{name}({value!r}): expected bytes (an int >= 0)")
    return value


def set_enabled_lms(enable: bool) -> None:
    """Turn LMS on (or off) for every model trained from now on."""
    SETTINGS.enabled = bool(enable)
    if SETTINGS.enabled:
        _add_global_hooks()
    else:
        from . import _sessions

        for model, s in list(_sessions.items()):
            if getattr(s, "automatic", False):
                s.remove()
                _sessions.pop(model, None)


def get_enabled_lms() -> bool:
    return SETTINGS.enabled


def set_limit_lms(limit: int) -> None:
    """GPU memory LMS fills before it moves tensors, in bytes; 0: all this process may use."""
    SETTINGS.limit = _bytes("set_limit_lms", limit)


def get_limit_lms() -> int:
    return SETTINGS.limit


def set_size_lms(size: int) -> None:
    """Tensors smaller than this (bytes) are never swapped."""
    SETTINGS.size = _bytes("set_size_lms", size)


def get_size_lms() -> int:
    return SETTINGS.size


def _add_global_hooks() -> None:
    if _hooks:
        return
    import torch.nn.modules.module as mm

    _hooks.append(mm.register_module_forward_pre_hook(_pre))
    _hooks.append(mm.register_module_forward_hook(_post, always_call=True))


def _depth() -> int:
    return getattr(_state, "depth", 0)


def _pre(module, args):
    depth = _depth()
    _state.depth = depth + 1
    if depth or not SETTINGS.enabled:
        return None
    import torch

    from . import _sessions, enable
    if module in _sessions or not torch.is_grad_enabled():
        return None
    if type(module).__name__ == "OptimizedModule":
        from .session import _compiled_note
        _compiled_note()
        return None
    if next(module.parameters(), None) is None:
        return None            # a loss function or other parameterless module: nothing to plan for
    s = enable(module, SETTINGS.limit)
    if s is not None:
        s.automatic = True
    return None


def _post(module, args, output):
    _state.depth = max(0, _depth() - 1)
    return None


def install(torch_module=None) -> None:
    """WML CE's names on ``torch.cuda`` (kept where they exist already, e.g. a WML CE torch)."""
    torch = torch_module if torch_module is not None else sys.modules.get("torch")
    if torch is None:
        return
    cuda = torch.cuda
    for name in NAMES:
        if not hasattr(cuda, name):
            setattr(cuda, name, globals()[name])


def set_lms_enabled_tf(enable=True) -> None:
    """``tf.config.experimental.set_lms_enabled``: wml's LMS is for torch (one line)."""
    if enable and not _said_tf:
        _said_tf.append(1)
        sys.stderr.write(TF_LINE + "\n")


def install_tf(tf_module=None) -> None:
    tf = tf_module if tf_module is not None else sys.modules.get("tensorflow")
    try:
        experimental = tf.config.experimental
    except AttributeError:
        return
    if not hasattr(experimental, "set_lms_enabled"):
        experimental.set_lms_enabled = set_lms_enabled_tf


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs a function on a module right after it is first imported (torch, tensorflow)."""

    def __init__(self, actions) -> None:
        self.actions = actions
        self.busy = set()

    def find_spec(self, fullname, path=None, target=None):
        action = self.actions.get(fullname)
        if action is None or fullname in self.busy:
            return None
        self.busy.add(fullname)
        try:
            import importlib.util
            spec = importlib.util.find_spec(fullname)
        finally:
            self.busy.discard(fullname)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        original = spec.loader.exec_module

        def exec_module(module):
            original(module)
            action(module)
        spec.loader.exec_module = exec_module
        return spec


def install_when_imported() -> None:
    """Install now where torch / tensorflow are imported already, else right after their import."""
    if "torch" in sys.modules:
        install(sys.modules["torch"])
    if "tensorflow" in sys.modules:
        install_tf(sys.modules["tensorflow"])
    pending = {name: action for name, action in (("torch", install), ("tensorflow", install_tf))
               if name not in sys.modules}
    if pending and not any(isinstance(f, _AfterImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport(pending))
