"""One self-contained HTML page of a report: plotly's figures, with plotly.js inlined once (about
4.6 MB), so the page opens on a login node or a laptop with no network.

Sections: what ran (program and arguments, site, nodes x ranks, start, wall time, exit status)
and the run in one line; the layout (nodes x local ranks, each cell a rank with its GPU and
cores, coloured by its compute time on a scale from zero, so that 62 and 64 ms look alike); per
rank step time split into compute, communication and waiting for the last rank; the stragglers
named with their node, and their compute step by step beside the median rank's; a chain's
timeline (each part's spans: queued, ran; each segment's step reached and last checkpoint) and
its segments; a sweep's every trial in a table as ``wml sweep show`` lists them, its metric
against each parameter (log axes labelled at decades) and its best completed trials.  Each
figure is a ``div.wml-plot`` with ``data-section`` naming it.
"""
from __future__ import annotations

import html
import json
import os
from pathlib import Path
from typing import List, Optional

import numpy as np

from ..errors import WmlError
from ..runstats.analysis import STRAGGLER_PCT, Analysis, partial_note
from ..runs.sweep_view import cell
from .run import COMPLETED, Part, Report, best_trials, stamp

COLORS = {"compute": "#4c78a8", "comm": "#f58518", "wait": "#e45756", "straggler": "#b10026", "other": "#aaaaaa"}
# the timeline's kinds of span (run.py: Span.kind), in legend order: (legend, colour)
SPAN_KINDS = {"queued": ("queued", "#c7c7c7"), "ran": ("ran", COLORS["compute"]),
              "attempt": ("attempt (ddlrun --restarts)", "#72b7b2"), "failed attempt": ("attempt that failed", COLORS["straggler"]),
              "restart": ("from the fault to the first step after the restart", COLORS["comm"])}


PLOTLY_MISSING = "the HTML report needs plotly: pip install 'wml[report]' (or plotly)"


def have_plotly() -> bool:
    try:
        import plotly.io  # noqa: F401
        from plotly.offline import get_plotlyjs  # noqa: F401
    except ImportError:
        return False
    return True


def _plotly():
    try:
        import plotly.io as pio
        from plotly.offline import get_plotlyjs
    except ImportError:
        raise WmlError(f"{PLOTLY_MISSING}; --no-html prints only the terminal summary") from None
    return pio, get_plotlyjs


# Figures are plain dicts of plotly.js's schema, handed over unvalidated: plotly's Python figure
# objects validate every property on first use of each trace type (0.25 s each, most of a
# 1,000-rank report's time).
_AXIS = {"gridcolor": "#e5e5e5", "zerolinecolor": "#cccccc", "automargin": True}


def _figure(data: list, layout: dict) -> dict:
    base = {"margin": {"l": 60, "r": 20, "t": 50, "b": 50}, "plot_bgcolor": "white", "paper_bgcolor": "white",
            "xaxis": dict(_AXIS), "yaxis": dict(_AXIS), "font": {"family": "sans-serif"}}
    for key, value in layout.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            base[key] = {**base[key], **value}
        else:
            base[key] = value
    return {"data": data, "layout": base}


def _figure_html(pio, fig: dict, section: str) -> str:
    div = pio.to_html(fig, full_html=False, include_plotlyjs=False, div_id=f"plot-{section}", validate=False,
                      config={"displaylogo": False, "responsive": True})
    return f'<div class="wml-plot" data-section="{html.escape(section)}">{div}</div>'


def _layout_figure(a: Analysis) -> dict:
    recs = a.records
    nodes = sorted({r.node_index for r in recs.ranks})
    width = max(r.local_rank for r in recs.ranks) + 1
    node_name = {r.node_index: row.node for r, row in zip(recs.ranks, a.rows)}
    z = [[None] * width for _ in nodes]
    text = [[""] * width for _ in nodes]
    row_of = {n: i for i, n in enumerate(nodes)}
    compute = {row.rank: row.compute_ms for row in a.rows}
    timed = any(v is not None for v in compute.values())
    if not timed:          # too few steps to time: the cells coloured by rank
        compute = {r.rank: float(r.rank) for r in recs.ranks}
    straggling = {s.rank for s in a.stragglers}
    for r in recs.ranks:
        i = row_of[r.node_index]
        z[i][r.local_rank] = compute.get(r.rank)
        gpu = "no GPU" if r.gpu is None else f"GPU {r.gpu}"
        text[i][r.local_rank] = (f"rank {r.rank}{' (straggler)' if r.rank in straggling else ''}<br>{gpu}<br>"
                                 f"cores {r.cores or '?'}")
    values = [v for v in compute.values() if v is not None]
    trace = {"type": "heatmap", "z": z, "x": [f"local {i}" for i in range(width)], "y": [node_name[n] for n in nodes],
             "text": text, "colorscale": [[0.0, "#f7fbff"], [0.5, "#6baed6"], [1.0, "#08306b"]],   # slow = dark
             # the scale starts at zero: a rank's shade is its share of the slowest's, not of the spread
             "zmin": 0.0, "zmax": max(max(values, default=0.0), 1e-9), "zauto": False,
             "xgap": 2 if len(nodes) <= 40 else 0, "ygap": 2 if len(nodes) <= 40 else 0,
             "colorbar": {"title": {"text": "compute ms (from 0)" if timed else "rank"}},
             "hovertemplate": "%{y}<br>%{text}<br>" + ("compute %{z:.1f} ms" if timed else "") + "<extra></extra>"}
    if len(recs.ranks) <= 64:
        trace["texttemplate"] = "%{text}"
    return _figure([trace], {
        "title": {"text": f"layout: {len(nodes)} node(s) x {width} rank(s), coloured by "
                          + ("compute per step" if timed else "rank (too few steps to time)")},
        "height": max(260, 60 + 40 * len(nodes)) if len(nodes) <= 40 else 900,
        "yaxis": {"autorange": "reversed", "type": "category"}, "xaxis": {"type": "category"}})


def _ranks_figure(a: Analysis) -> dict:
    rows = [r for r in a.rows if r.step_ms is not None]
    x = [r.rank for r in rows]
    wait = [r.wait_ms or 0.0 for r in rows]
    comm = [max((r.comm_ms or 0.0) - (r.wait_ms or 0.0), 0.0) for r in rows]
    compute = [r.compute_ms or 0.0 for r in rows]
    hover = [f"rank {r.rank} on {html.escape(r.node)}" for r in rows]
    data = [{"type": "bar", "name": name, "x": x, "y": y, "marker": {"color": COLORS[key]}, "hovertext": hover}
            for name, y, key in (("compute", compute, "compute"), ("communication (transfer)", comm, "comm"),
                                 ("waiting for the last rank", wait, "wait"))]
    notes = [{"x": s.rank, "y": next(r.step_ms for r in rows if r.rank == s.rank), "showarrow": True, "arrowhead": 2,
              "text": f"straggler: rank {s.rank}<br>{html.escape(s.node)} {s.excess_pct:+.0f} %",
              "font": {"color": COLORS["straggler"]}} for s in a.stragglers[:10]]
    return _figure(data, {"barmode": "stack", "title": {"text": "per rank: a step's time (mean, ms)"},
                          "xaxis": {"title": {"text": "rank"}}, "yaxis": {"title": {"text": "ms per step"}},
                          "height": 420, "legend": {"orientation": "h", "y": -0.2}, "annotations": notes})


def _steps_figure(a: Analysis) -> Optional[dict]:
    """Compute per step, over the steps every rank kept: the slowest, median and fastest rank, and
    each straggler."""
    from ..runstats.analysis import aligned_steps

    aligned = aligned_steps(a.records.ranks)
    if aligned is None:
        return None
    first, compute = aligned[0], aligned[1] * 1e3
    steps = list(range(first, first + compute.shape[1]))

    def line(name, y, color):
        return {"type": "scatter", "mode": "lines", "x": steps, "y": y.tolist(), "name": name, "line": {"color": color}}

    data = [line("slowest rank", compute.max(axis=0), "#bbbbbb"),
            line("median rank", np.median(compute, axis=0), COLORS["compute"]),
            line("fastest rank", compute.min(axis=0), "#dddddd")]
    index = {r.rank: i for i, r in enumerate(a.records.ranks)}
    for s in a.stragglers[:5]:
        data.append(line(f"rank {s.rank} ({s.node})", compute[index[s.rank]], COLORS["straggler"]))
    return _figure(data, {"title": {"text": "compute per step (ms), the last steps kept by every rank"},
                          "xaxis": {"title": {"text": "step"}},
                          "yaxis": {"title": {"text": "ms"}, "rangemode": "tozero"}, "height": 380})


def _timeline_figure(rep: Report) -> Optional[dict]:
    """The run's spans (run.py: Report.timeline) as bars over time, a trace per kind of span;
    each part that ended noted with its steps (reached, last checkpoint)."""
    spans = rep.timeline()
    if not spans:
        return None
    t0 = min(s.start for s in spans)
    data = []
    kinds = list(SPAN_KINDS) + sorted({s.kind for s in spans} - set(SPAN_KINDS))
    for kind in kinds:
        sel = [s for s in spans if s.kind == kind]
        if not sel:
            continue
        legend, color = SPAN_KINDS.get(kind, (kind, COLORS["other"]))
        data.append({"type": "bar", "name": legend, "orientation": "h", "y": [s.row for s in sel],
                     "x": [(s.end - s.start) / 60 for s in sel], "base": [(s.start - t0) / 60 for s in sel],
                     "marker": {"color": color},
                     "hovertext": [f"{s.row} {legend} {stamp(s.start)} to {stamp(s.end)} UTC"
                                   + (f" ({s.note})" if s.note else "") for s in sel]})
    notes = [{"x": (p.ended - t0) / 60, "y": p.label, "text": p.steps_text, "showarrow": False, "xanchor": "left"}
             for p in rep.parts if p.ended and p.steps_text]
    return _figure(data, {"title": {"text": f"over time (minutes from {stamp(t0)} UTC)"},
                          "barmode": "overlay", "xaxis": {"title": {"text": "minutes"}, "rangemode": "tozero"},
                          "yaxis": {"autorange": "reversed", "type": "category"}, "annotations": notes,
                          "height": max(240, 80 + 50 * len({s.row for s in spans}))})


def _param_names(rep: Report) -> List[str]:
    """The trials' parameters in `wml sweep show`'s order (the grid's)."""
    names: List[str] = []
    for p in rep.parts:
        names += [k for k in p.params if k not in names]
    return names


def _sweep_figure(rep: Report) -> Optional[dict]:
    names = _param_names(rep)
    scored = [p for p in rep.parts if p.metrics and isinstance(p.metrics.get(rep.metric), (int, float))
              and not isinstance(p.metrics.get(rep.metric), bool)]
    if not names or not scored or rep.metric is None:
        return None
    best = {id(p) for p in best_trials(rep, 1)}

    def color(p: Part) -> str:
        return COLORS["straggler"] if id(p) in best else COLORS["compute"] if p.state == COMPLETED else COLORS["other"]

    data, layout, gap = [], {}, 0.06
    width = (1.0 - gap * (len(names) - 1)) / len(names)
    for i, name in enumerate(names, start=1):
        xs = [_value(p.params.get(name)) for p in scored]
        suffix = "" if i == 1 else str(i)
        data.append({"type": "scatter", "mode": "markers", "name": name, "showlegend": False,
                     "x": xs, "y": [p.metrics[rep.metric] for p in scored], "xaxis": f"x{suffix}", "yaxis": "y",
                     "marker": {"size": [14 if id(p) in best else 9 for p in scored], "color": [color(p) for p in scored]},
                     "hovertext": [f"{p.label} ({p.state}): " + ", ".join(f"{k}={v}" for k, v in p.params.items())
                                   for p in scored]})
        lo = (i - 1) * (width + gap)
        axis = dict(_AXIS, domain=[lo, lo + width], anchor="y", title={"text": name})
        numeric = all(isinstance(x, (int, float)) for x in xs)
        if numeric and len(set(xs)) > 2 and min(xs) > 0 and max(xs) / min(xs) >= 100:
            axis.update(type="log", dtick=1)         # ticks and labels at the decades only
        elif not numeric:
            axis["type"] = "category"
        layout[f"xaxis{suffix}"] = axis
    marked = "the best completed trial in red, " if best else ""
    layout.update({"title": {"text": f"{rep.metric} against each parameter ({'largest' if rep.maximize else 'smallest'} "
                                     f"is best; {marked}other states grey)"},
                   "yaxis": {"title": {"text": rep.metric}}, "height": 440})
    return _figure(data, layout)


def _value(text):
    try:
        return float(text) if "." in str(text) or "e" in str(text).lower() else int(text)
    except (TypeError, ValueError):
        return str(text)


def _table(headers: List[str], rows: List[List[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _ms(v: Optional[float]) -> str:
    return "-" if v is None else f"{v:.1f}"


def render_page(rep: Report) -> str:
    pio, get_plotlyjs = _plotly()
    sections: List[str] = []
    main: Optional[Part] = rep.main
    if rep.kind in ("chain", "sweep") or any(p.attempt_spans() for p in rep.parts):    # a job healed in place too
        fig = _timeline_figure(rep)
        if fig is not None:
            sections.append("<h2>Timeline</h2>" + _figure_html(pio, fig, "timeline"))
    if rep.kind == "chain":
        rows = [[p.label, p.state, cell(p.exit_code), stamp(p.submitted), stamp(p.started), stamp(p.ended),
                 cell(p.step_reached), cell(p.checkpoint), p.line] for p in rep.parts]
        sections.append("<h2>Segments</h2>"
                        + _table(["segment", "state", "exit", "submitted (UTC)", "ran from", "to", "step reached",
                                  "last checkpoint", "summary"], rows))
    if rep.kind == "sweep":
        fig = _sweep_figure(rep)
        best = best_trials(rep)
        rows = [[cell(r.get(c)) for c in rep.columns] for r in rep.rows]
        if rep.metric is None:
            verdict = "No best trial: no trial has printed a JSON object of numbers."
        elif not best:
            verdict = f"No best trial: no completed trial has {rep.metric}."
        else:
            verdict = (f"Best by {rep.metric} ({'largest' if rep.maximize else 'smallest'} first, completed trials): "
                       + ", ".join(f"{p.label} ({p.metrics[rep.metric]:.6g})" for p in best) + ".")
        sections.append(f"<h2>Trials ({len(rep.parts)})</h2>" + _table(rep.columns, rows)
                        + f'<p class="best">{html.escape(verdict)}</p>'
                        + (_figure_html(pio, fig, "sweep") if fig else ""))
    if main is not None and main.analysis is not None:
        a = main.analysis
        where = "" if rep.kind == "job" else f" of {html.escape(main.label)} ({html.escape(rep.main_why)})"
        sections.append(f"<h2>Layout{where}</h2>" + _figure_html(pio, _layout_figure(a), "layout"))
        if a.step_ms is None:
            sections.append(f"<h2>Ranks{where}</h2><p>{html.escape(main.line)}: no step time per rank to show.</p>")
        else:
            sections.append(f"<h2>Ranks{where}</h2>" + _figure_html(pio, _ranks_figure(a), "ranks"))
        if a.step_ms is None:
            strag = ""
        elif a.stragglers:
            rows = [[str(s.rank), s.node, f"{s.compute_ms:.1f}", f"{s.others_ms:.1f}", f"{s.excess_pct:+.0f} %",
                     f"{s.others_wait_ms:.1f}", f"{s.others_wait_s:.1f}"] for s in a.stragglers]
            strag = _table(["rank", "node", "compute ms/step", "the others' median", "above it", "others wait ms/step",
                            "others wait s (run)"], rows)
        elif len(a.rows) > 1:
            strag = (f"<p>None: no rank's compute is more than {STRAGGLER_PCT:.0f} % above the median of the other "
                     f"ranks' (the median rank's: {_ms(a.median_compute_ms)} ms).</p>")
        else:
            strag = ""
        steps = _steps_figure(a)
        if strag or steps:
            sections.append(f"<h2>{'Stragglers' if len(a.rows) > 1 else 'Steps'}</h2>" + strag
                            + (_figure_html(pio, steps, "steps") if steps else ""))
    elif rep.kind == "job":
        sections.append(f"<p>{html.escape(rep.parts[0].line)}</p>")
    line = f"{main.label}: {main.line}" if main is not None else ""
    partial = partial_note(main.records) if main is not None and main.records is not None else ""
    wait = ("measured by the ranks (each carries its arrival time on the agreement every collective makes)"
            if main is None or main.analysis is None or main.analysis.wait_measured else
            "inferred (these records did not measure it): a rank's time in collectives less the least any rank spent")
    return _PAGE.format(title=html.escape(rep.title), what=html.escape(rep.run.line()), line=html.escape(line),
                        partial=f'<p class="partial">{html.escape(partial.lstrip("; "))}</p>' if partial else "",
                        plotlyjs=get_plotlyjs(), sections="\n".join(sections), wait=html.escape(wait),
                        data=html.escape(json.dumps({"kind": rep.kind, "parts": len(rep.parts)})))


def write_page(rep: Report, path: Path) -> Path:
    text = render_page(rep)
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise WmlError(f"cannot write the report page {path}: {e.strerror or e}") from None
    return path


_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ font-family: sans-serif; margin: 1.5em; color: #222; }}
h1 {{ font-size: 1.3em; }} h2 {{ font-size: 1.1em; margin-top: 1.5em; border-bottom: 1px solid #ddd; }}
table {{ border-collapse: collapse; margin: .5em 0; font-size: .9em; }}
td, th {{ border: 1px solid #ccc; padding: 2px 8px; text-align: left; }}
.partial {{ color: #a05000; font-weight: bold; }}
.what {{ font-family: monospace; }}
</style>
<script type="text/javascript">{plotlyjs}</script>
</head><body data-report="{data}">
<h1>{title}</h1>
<p class="what">{what}</p>
<p>{line}</p>
{partial}
{sections}
<p style="color:#888;font-size:.8em">wml report: every rank's record from ddl_runtime (the last 1,024 steps one by one).
A rank's time inside collectives is communication, its compute the rest of a step; waiting for the last rank is {wait}.</p>
</body></html>
"""
