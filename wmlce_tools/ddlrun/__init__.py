"""``ddlrun``: runs a program once per rank of a Layout with the site's launcher.

Modules: ``hostlist`` (Slurm hostlist syntax), ``hosts`` (which hosts this job has: -H,
--hostfile, LSF, Slurm, Cobalt, or this machine), ``plan`` (options + hosts -> ResourceRequest ->
Layout -> launch command), ``rankfile`` (Open MPI rankfile / jsrun ERF), ``rankexec`` (the
per-rank shim the launcher runs in front of the program), ``preflight`` (``--check``),
``cli`` (the command line).  Importing this package imports nothing heavy.
"""
