"""Staging an environment to node-local storage before a job's ranks start (issue 31).

``archive.py`` builds one archive per environment (an uncompressed tar) and its manifest,
cached beside the environment and keyed by its lock; ``node.py`` unpacks it on one node (lock,
free space, temp dir, manifest check, relocation, atomic rename, cleanup); ``script.py``: the
job script's lines for it;
``job.py`` is the one step a job script calls: it moves the archive to every node (Slurm's
``sbcast``, elsewhere one reader broadcasting through ``ddlrun`` to one rank per node), has
every node unpack it, and prints the staged prefix.  ``python -m wmlce_tools.stage --help``.

A layer with `chain` and `sweeps`: may import `ddlrun` (``ddlrun/place.py`` names the node and
expands the site's node-local place; the broadcast runs ``ddlrun``), `env`, `site` and the
foundation; never `jobscript` or above.
"""
