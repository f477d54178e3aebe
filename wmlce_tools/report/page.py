"""One self-contained HTML page of a report: plotly's figures, with plotly.js inlined once (about
4.6 MB), so the page opens on a login node or a laptop with no network.

Sections: the run in one line; the layout (nodes x local ranks, each cell a rank with its GPU and
cores, coloured by its compute time); per-rank step time split into compute, communication and
waiting for the last rank; the stragglers named with their node, and their compute step by step
beside the median rank's; a chain's segments over time; a sweep's metric against each parameter
and its best trials.  Each figure is a ``div.wml-plot`` with ``data-section`` naming it.
"""
from __future__ import annotations

import html
import json
import os
from pathlib import Path
from typing import List, Optional

import numpy as np

from ..errors import WmlError
from ..runstats.analysis import Analysis, partial_note
from .run import Part, Report, best_trials, stamp

COLORS = {"compute": "#4c78a8", "comm": "#f58518", "wait": "#e45756", "straggler": "#b10026"}


def _plotly():
    try:
        import plotly.io as pio
        from plotly.offline import get_plotlyjs
    except ImportError:
        raise WmlError("the HTML report needs plotly: pip install 'wml[report]' (or plotly); "
                       "--no-html prints only the terminal summary") from None
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
    trace = {"type": "heatmap", "z": z, "x": [f"local {i}" for i in range(width)], "y": [node_name[n] for n in nodes],
             "text": text, "colorscale": [[0.0, "#f7fbff"], [0.5, "#6baed6"], [1.0, "#08306b"]],   # slow = dark
             "xgap": 2 if len(nodes) <= 40 else 0, "ygap": 2 if len(nodes) <= 40 else 0,
             "colorbar": {"title": {"text": "compute ms" if timed else "rank"}},
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
                          "xaxis": {"title": {"text": "step"}}, "yaxis": {"title": {"text": "ms"}}, "height": 380})


def _segments_figure(rep: Report) -> Optional[dict]:
    rows = []
    for p in rep.parts:
        if p.submitted and p.started:
            rows.append((p.label, "queued", p.submitted, p.started, p.state))
        if p.started and p.ended:
            rows.append((p.label, "ran", p.started, p.ended, p.state))
    if not rows:
        return None
    t0 = min(r[2] for r in rows)
    data = []
    for what, color in (("queued", "#c7c7c7"), ("ran", COLORS["compute"])):
        sel = [r for r in rows if r[1] == what]
        if sel:
            data.append({"type": "bar", "name": what, "orientation": "h", "y": [r[0] for r in sel],
                         "x": [(r[3] - r[2]) / 60 for r in sel], "base": [(r[2] - t0) / 60 for r in sel],
                         "marker": {"color": color},
                         "hovertext": [f"{r[0]} {what} {stamp(r[2])} to {stamp(r[3])} UTC ({r[4]})" for r in sel]})
    notes = [{"x": (p.ended - t0) / 60, "y": p.label, "text": f"step {p.step}", "showarrow": False, "xanchor": "left"}
             for p in rep.parts if p.ended and p.step is not None]
    return _figure(data, {"title": {"text": f"segments over time (minutes from {stamp(t0)} UTC)"},
                          "barmode": "overlay", "xaxis": {"title": {"text": "minutes"}},
                          "yaxis": {"autorange": "reversed", "type": "category"}, "annotations": notes,
                          "height": max(240, 80 + 50 * len(rep.parts))})


def _sweep_figure(rep: Report) -> Optional[dict]:
    names = sorted({k for p in rep.parts for k in p.params})
    scored = [p for p in rep.parts if p.metrics and isinstance(p.metrics.get(rep.metric), (int, float))]
    if not names or not scored or rep.metric is None:
        return None
    best = {id(p) for p in best_trials(rep, 1)}
    data, layout, gap = [], {}, 0.06
    width = (1.0 - gap * (len(names) - 1)) / len(names)
    notes = []
    for i, name in enumerate(names, start=1):
        xs = [_value(p.params.get(name)) for p in scored]
        suffix = "" if i == 1 else str(i)
        data.append({"type": "scatter", "mode": "markers", "name": name, "showlegend": False,
                     "x": xs, "y": [p.metrics[rep.metric] for p in scored], "xaxis": f"x{suffix}", "yaxis": "y",
                     "marker": {"size": [14 if id(p) in best else 9 for p in scored],
                                "color": [COLORS["straggler"] if id(p) in best else COLORS["compute"] for p in scored]},
                     "hovertext": [f"{p.label}: " + ", ".join(f"{k}={v}" for k, v in p.params.items()) for p in scored]})
        lo = (i - 1) * (width + gap)
        axis = dict(_AXIS, domain=[lo, lo + width], anchor="y", title={"text": name})
        numeric = all(isinstance(x, (int, float)) for x in xs)
        if numeric and len(set(xs)) > 2 and min(xs) > 0 and max(xs) / min(xs) >= 100:
            axis["type"] = "log"
        elif not numeric:
            axis["type"] = "category"
        layout[f"xaxis{suffix}"] = axis
    layout.update({"title": {"text": f"{rep.metric} against each parameter ({'largest' if rep.maximize else 'smallest'} "
                                     f"is best; the best trial in red)"},
                   "yaxis": {"title": {"text": rep.metric}}, "height": 440, "annotations": notes})
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
    if rep.kind == "chain":
        rows = [[p.label, p.state, stamp(p.submitted), stamp(p.started), stamp(p.ended),
                 "-" if p.step is None else str(p.step), p.line] for p in rep.parts]
        fig = _segments_figure(rep)
        sections.append("<h2>Segments</h2>" + (_figure_html(pio, fig, "segments") if fig else
                                                "<p>No segment has started yet.</p>")
                        + _table(["segment", "state", "submitted (UTC)", "ran from", "to", "step", "summary"], rows))
    if rep.kind == "sweep":
        fig = _sweep_figure(rep)
        best = best_trials(rep)
        names = sorted({k for p in rep.parts for k in p.params})
        rows = [[p.label, *[str(p.params.get(n, "")) for n in names], f"{p.metrics[rep.metric]:.6g}", p.state,
                 _ms(p.analysis.step_ms) if p.analysis else "-"] for p in best]
        sections.append("<h2>Trials</h2>" + (_figure_html(pio, fig, "sweep") if fig else
                                              "<p>No trial has printed a numeric metric yet.</p>")
                        + (f"<h3>Best trials by {html.escape(rep.metric)}</h3>"
                           + _table(["trial", *names, rep.metric, "state", "step ms"], rows) if rows else ""))
    if main is not None and main.analysis is not None:
        a = main.analysis
        where = "" if rep.kind == "job" else f" of {html.escape(main.label)}"
        sections.append(f"<h2>Layout{where}</h2>" + _figure_html(pio, _layout_figure(a), "layout"))
        if a.step_ms is None:
            sections.append(f"<h2>Ranks{where}</h2><p>{html.escape(main.line)}: no step time per rank to show.</p>")
        else:
            sections.append(f"<h2>Ranks{where}</h2>" + _figure_html(pio, _ranks_figure(a), "ranks"))
        if a.step_ms is None:
            strag = ""
        elif a.stragglers:
            rows = [[str(s.rank), s.node, f"{s.compute_ms:.1f}", f"{s.excess_pct:+.0f} %", f"{s.others_wait_ms:.1f}",
                     f"{s.others_wait_s:.1f}"] for s in a.stragglers]
            strag = _table(["rank", "node", "compute ms/step", "vs median", "others wait ms/step",
                            "others wait s (run)"], rows)
        else:
            strag = (f"<p>None: no rank's compute is more than 10 % above the median rank's "
                     f"({_ms(a.median_compute_ms)} ms).</p>")
        steps = _steps_figure(a)
        if strag or steps:
            sections.append("<h2>Stragglers</h2>" + strag + (_figure_html(pio, steps, "steps") if steps else ""))
    elif rep.kind == "job":
        sections.append(f"<p>{html.escape(rep.parts[0].line)}</p>")
    line = f"{main.label}: {main.line}" if main is not None else ""
    partial = partial_note(main.records) if main is not None and main.records is not None else ""
    return _PAGE.format(title=html.escape(rep.title), line=html.escape(line),
                        partial=f'<p class="partial">{html.escape(partial.lstrip("; "))}</p>' if partial else "",
                        plotlyjs=get_plotlyjs(), sections="\n".join(sections),
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
</style>
<script type="text/javascript">{plotlyjs}</script>
</head><body data-report="{data}">
<h1>{title}</h1>
<p>{line}</p>
{partial}
{sections}
<p style="color:#888;font-size:.8em">wml report: every rank's record from ddl_runtime (the last 1,024 steps one by one);
waiting for the last rank = in each step, the slowest rank's compute minus this rank's.</p>
</body></html>
"""
