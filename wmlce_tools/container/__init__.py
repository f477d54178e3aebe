"""Containers as a job's environment (``--container IMAGE``): the hybrid model, where the
host's launcher starts one container per rank and wml's rank shim runs inside it.

``launch.py``: the image and runtime a job uses (``ContainerLaunch``), checked, and how each
runtime wraps a rank's command (the flags, binds and environment of the site's ``container:``
section plus binds and variables handed in from elsewhere, e.g. the fabric's).
``check.py``: the checks ddlrun makes before any rank starts (runtime present, image there,
python and the program's imports inside).

May import: fabric (its binds and variables for a container), site, quoting and the foundation
modules.  Imported by jobscript, ddlrun and the options.
"""
