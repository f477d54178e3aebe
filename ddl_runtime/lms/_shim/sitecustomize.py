"""wml's LMS start-up hook (on PYTHONPATH only under ``ddlrun --lms`` / ``WML_LMS=1``): WML CE's
``torch.cuda.set_enabled_lms`` etc. appear when torch is imported; then the ``sitecustomize``
this one hides (a site's or an environment's) runs as it would have."""
import os
import sys


def _install():
    if os.environ.get("WML_LMS", "1").strip().lower() in ("0", "false", "no", "off"):
        return
    try:
        from ddl_runtime.lms import wmlce
    except ImportError:   # the shim's own tree, when ddl_runtime is not installed where this python looks
        sys.path.append(os.path.dirname(os.path.dirname(os.path.dirname(_HERE))))
        from ddl_runtime.lms import wmlce
    wmlce.install_when_imported()


def _chain():
    me = sys.modules.pop("sitecustomize", None)
    saved = sys.path[:]
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
    try:
        import sitecustomize  # noqa: F401  the next one on the path
    except ImportError as e:
        if e.name != "sitecustomize":
            raise
    finally:
        sys.path[:] = saved
        if me is not None and "sitecustomize" not in sys.modules:
            sys.modules["sitecustomize"] = me


_HERE = os.path.dirname(os.path.abspath(__file__))
_install()
_chain()
