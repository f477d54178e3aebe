from ._version import __version__  # noqa: F401


def __getattr__(name):
    """``from wmlce_tools import submit, map, sweep, resume`` (imported on first use: ``wml``
    itself stays light)."""
    if name in ("submit", "map", "sweep", "resume", "Job", "Sweep", "RemoteError"):
        from . import api

        return getattr(api, name)
    raise AttributeError(f"module 'wmlce_tools' has no attribute {name!r}")
