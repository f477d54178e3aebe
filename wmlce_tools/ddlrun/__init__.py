"""``ddlrun``: runs a program once per rank of a Layout with the site's launcher.

Modules: ``hostlist`` (Slurm hostlist syntax), ``hosts`` (which hosts this job has: -H,
--hostfile, LSF, Slurm, Cobalt, or this machine), ``plan`` (options + hosts -> ResourceRequest ->
Layout -> launch command), ``rankfile`` (Open MPI rankfile / jsrun ERF), ``rankexec`` (the
per-rank shim the launcher runs in front of the program), ``preflight`` (``--check``),
``cli`` (the command line), ``place`` (the node-local place a staged env is unpacked to, and
node names: stdlib only, the per-rank shim uses it), ``exe`` (which ``ddlrun`` a job script
runs).  Importing this package imports nothing heavy.

The ddlrun layer, above ``schedulers | launchers | env``: may import ``launchers``, ``layout``,
``site`` and the foundation; never ``stage``, ``chain``, ``sweeps``, ``jobscript`` or above.
"""
