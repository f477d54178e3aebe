"""One launch, built once: ``plan.py`` (``build_launch``: SiteProfile + the launch's options +
Layout -> ``LaunchPlan``: modules, the ranks' environment with each value's source, the
container, the program; each variable a ``rankenv.EnvValue``, decided by ``rankenv.decide``,
the one rule for what a rank gets), ``command.py`` (the one assembly of a launcher's command line), ``describe.py``
(the plan in words).  The job script renders the plan, ddlrun builds the same plan from the same
options and runs it; sweeps, chains and the API make job scripts.

A layer between `ddlrun` (above) and `schedulers | launchers | env | container` (below).
May import: those, `fabric`, `layout`, `site` and the foundation; never `ddlrun` or anything above.
"""
