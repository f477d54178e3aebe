"""``wml report``: what a run did, from the runtime's per-rank records (ddl_runtime/core/stats.py).

    from wmlce_tools.report import report
    r = report("wml-job-20261126-091855")      # a job, a run id, a directory, or an API Job/Sweep
    print(r.summary())
    r.write_html("report.html")

records.py reads a job's records, analysis.py says what they mean (step, wait, stragglers),
run.py finds a job, chain or sweep and its parts, summary.py prints it (rich), page.py writes
the page (plotly, inlined), cli.py is the command.
"""
from __future__ import annotations


def report(run, metric=None, maximize: bool = False):
    """The Report of ``run`` (see run.py); raises WmlError when it has no record at all."""
    from .run import check_has_records, find_report

    rep = find_report(run, metric=metric, maximize=maximize)
    check_has_records(rep)
    return rep
