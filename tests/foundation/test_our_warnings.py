"""A warning from wml's own code fails the tests (issue 47): pyproject.toml's filters for the
warnings attributed to our modules, tests/conftest.py's ``warnings_from_our_code_fail`` for a
library's warning about what our code called.  The two that users saw are gone: rattler's
``Platform`` (wml env) and torch's ``all_gather_into_tensor`` (horovod.torch on NCCL)."""
from __future__ import annotations

import warnings

import pytest


def test_a_warning_attributed_to_our_module_fails():
    with pytest.raises(UserWarning, match="probe"):
        warnings.warn_explicit("probe", UserWarning, "wmlce_tools/layout.py", 1, module="wmlce_tools.layout")
    with pytest.raises(FutureWarning, match="probe"):
        warnings.warn_explicit("probe", FutureWarning, "ddl_runtime/torch.py", 1, module="ddl_runtime.torch")


def test_a_library_warning_about_our_call_fails_and_others_are_only_recorded(monkeypatch):
    import rattler

    from wmlce_tools.env.create import current_platform

    def deprecated_current():   # a library's deprecation, attributed to the library itself
        warnings.warn("`current` is deprecated (probe)", DeprecationWarning, stacklevel=1)
        return "linux-64"

    monkeypatch.setattr(rattler.Subdir, "current", staticmethod(deprecated_current))
    with pytest.raises(DeprecationWarning, match="probe"):
        current_platform()
    recorded = []
    monkeypatch.setattr(warnings, "_showwarnmsg_impl", recorded.append)
    assert deprecated_current() == "linux-64"       # no wml code on the stack: recorded, not raised
    assert [str(w.message) for w in recorded] == ["`current` is deprecated (probe)"]


def test_wml_env_names_the_platform_without_a_deprecated_name():
    from wmlce_tools.env.create import current_platform

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert current_platform() == "linux-64"
    assert [str(w.message) for w in caught] == []


def test_nccl_ops_gather_without_a_deprecated_torch_call():
    torch = pytest.importorskip("torch")
    import torch.distributed as dist

    from ddl_runtime.transports.gpu import nccl_ops

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            (out,) = nccl_ops.allgather_start(dist.group.WORLD, [torch.arange(3.0)], [[3]], 0).wait()
    finally:
        dist.destroy_process_group()
    assert out.tolist() == [0.0, 1.0, 2.0]
    assert [str(w.message) for w in caught if "deprecated" in str(w.message)] == []


def test_what_a_library_says_as_our_code_imports_it_is_only_recorded(tmp_path, monkeypatch):
    """conda-lock's vendored conda warns as it is imported (a PendingDeprecationWarning of its own):
    not a call of ours, so it is recorded, not raised.  Here wml's lazy command group imports a
    module that warns so (as ``wml env`` imports conda-lock)."""
    import typer

    from wmlce_tools.cli import app

    (tmp_path / "noisy_lib_47.py").write_text(
        "import warnings\nimport typer\n"
        "warnings.warn('noisy import (probe)', PendingDeprecationWarning, stacklevel=2)\n"
        "app = typer.Typer()\n\n@app.command()\ndef hello():\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    group = typer.main.get_command(app)
    monkeypatch.setitem(type(group).LAZY, "noisy47", ("noisy_lib_47", "app"))
    recorded = []
    monkeypatch.setattr(warnings, "_showwarnmsg_impl", recorded.append)
    assert group.get_command(None, "noisy47") is not None
    assert [str(w.message) for w in recorded] == ["noisy import (probe)"]
