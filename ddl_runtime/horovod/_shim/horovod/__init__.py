"""``horovod`` as an alias of ``ddl_runtime.horovod`` (on PYTHONPATH only under ``ddlrun --horovod``).

``import horovod.torch as hvd`` returns the module object ``ddl_runtime.horovod.torch`` itself
(not a copy), at any depth (``horovod.torch.mpi_ops``, ``horovod.tensorflow.keras``), through a
finder placed first on ``sys.meta_path``.  A Horovod module wml does not provide (e.g.
``horovod.spark``) is a ModuleNotFoundError naming what is provided.
"""
import importlib
import importlib.abc
import importlib.util
import sys

_ALIAS = "horovod"
_TARGET = "ddl_runtime.horovod"
_PROVIDED = "horovod.torch, horovod.tensorflow, horovod.tensorflow.keras and horovod.keras"


class _AliasLoader(importlib.abc.Loader):
    """Hands out the already imported target module; its own ``__spec__`` is kept."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.original_spec = None

    def create_module(self, spec):
        module = importlib.import_module(self.target)
        self.original_spec = module.__spec__
        return module

    def exec_module(self, module) -> None:
        module.__spec__ = self.original_spec  # the import system stamped the alias's spec on it


class _AliasFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if not fullname.startswith(_ALIAS + "."):
            return None
        real = _TARGET + fullname[len(_ALIAS):]
        if real in sys.modules:
            found = True
        else:
            try:
                found = importlib.util.find_spec(real) is not None
            except ModuleNotFoundError:
                found = False
        if not found:
            raise ModuleNotFoundError(f"No module named {fullname!r}: wml's Horovod layer provides {_PROVIDED}",
                                      name=fullname)
        return importlib.util.spec_from_loader(fullname, _AliasLoader(real))


if not any(isinstance(f, _AliasFinder) for f in sys.meta_path):
    sys.meta_path.insert(0, _AliasFinder())

sys.modules[_ALIAS] = importlib.import_module(_TARGET)
