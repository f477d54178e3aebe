"""``wml report RUN``: the terminal summary of a job, a chained run or a sweep, and one
self-contained HTML page (``--html``, default ``<run directory>/report.html``)."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer
from typing_extensions import Annotated

from ..errors import WmlError
from ..quoting import sh_quote


def report_cmd(run: Annotated[str, typer.Argument(help="A job (the id wml submit printed, @N), a run id (a chain's or a sweep's), or a job's, chain's or sweep's directory.")],
               html: Annotated[Optional[str], typer.Option("--html", help="Where to write the page (default: report.html in the run's directory; without plotly installed the summary says how to get it).")] = None,
               no_html: Annotated[bool, typer.Option("--no-html", help="Only the terminal summary.")] = False,
               metric: Annotated[Optional[str], typer.Option("--metric", help="A sweep's metric (default: the first numeric one its trials printed).")] = None,
               maximize: Annotated[bool, typer.Option("--maximize", help="A sweep's best trials (completed ones only) have the largest metric (default: the smallest).")] = False) -> None:
    """What a run did: what ran (program, site, nodes x ranks, start, wall time, exit status),
    layout, per-rank compute, communication and measured wait for the last rank, stragglers with
    their node, a chain's segments (step reached, last checkpoint), a sweep's every trial and its
    metric against each parameter; in the terminal and as one HTML page that opens without a
    network (plotly; without it, the summary and how to get the page)."""
    from rich.console import Console

    from .page import PLOTLY_MISSING, have_plotly
    from .run import check_has_records, find_report
    from .summary import print_report

    if html is not None and no_html:
        raise WmlError("--html and --no-html: give one of them")
    if html is not None and not have_plotly():     # asked for the page: nothing printed, one error
        raise WmlError(f"--html {html}: {PLOTLY_MISSING}")
    rep = find_report(run, metric=metric, maximize=maximize)
    check_has_records(rep)
    print_report(rep, Console(highlight=False))
    if no_html:
        return
    if not have_plotly():    # the summary is the report; the page is one install away
        sys.stdout.write(f"page: not written: {PLOTLY_MISSING}, then wml report {sh_quote(run)}\n")
        return
    path = html if html is not None else str((rep.run_dir or Path(".")) / "report.html")
    from .page import write_page

    written = write_page(rep, Path(path))
    sys.stdout.write(f"page: {written}\n")


def register(app: typer.Typer) -> None:
    app.command("report")(report_cmd)
