"""The one place wml's version is written (the package root re-exports it)."""
__version__ = "0.1.0"
