"""Helpers shared by several test packages (tests/ is on sys.path through tests/conftest.py)."""
