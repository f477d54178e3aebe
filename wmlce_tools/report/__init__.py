"""``wml report``: what a run did, from the runtime's per-rank records (ddl_runtime/core/stats.py).

    from wmlce_tools.report import report, summary, write_html
    r = report("wml-job-20261126-091855")      # a job, a run id, a directory, or an API Job/Sweep
    print(summary(r))
    write_html(r, "report.html")

The records themselves are read and analysed below the job side, in ``wmlce_tools/runstats``
(records.py, analysis.py: step, wait, stragglers; endline.py: the one line ddlrun and ``wml
status`` print), so that ddlrun can print its end line without this package.  Here: run.py finds
a job, chain or sweep and its parts, summary.py prints it (rich), page.py writes the page
(plotly, inlined), cli.py is the command.  May import: runs, jobs, chain, sweeps, schedulers,
runstats, site and the foundation modules; imported by cli and api.
"""
from __future__ import annotations


def report(run, metric=None, maximize: bool = False):
    """The Report of ``run`` (see run.py); raises WmlError when it has no record at all."""
    from .run import check_has_records, find_report

    rep = find_report(run, metric=metric, maximize=maximize)
    check_has_records(rep)
    return rep


def summary(rep) -> str:
    """The terminal summary of a Report as plain text."""
    from .summary import render_text

    return render_text(rep)


def write_html(rep, path):
    """One self-contained page (plotly.js inlined: it opens without a network); returns its path."""
    from pathlib import Path

    from .page import write_page

    return write_page(rep, Path(path))
