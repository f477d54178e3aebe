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
from .analysis import Analysis, partial_note
from .run import Part, Report, best_trials, stamp

COLORS = {"compute": "#4c78a8", "comm": "#f58518", "wait": "#e45756", "straggler": "#b10026"}


def _plotly():
    try:
        import plotly.graph_objects as go
        import plotly.io as pio
        from plotly.offline import get_plotlyjs
    except ImportError:
        raise WmlError("the HTML report needs plotly: pip install 'wml[report]' (or plotly); "
                       "--no-html prints only the terminal summary") from None
    return go, pio, get_plotlyjs


def _figure_html(pio, fig, section: str) -> str:
    fig.update_layout(margin=dict(l=60, r=20, t=fig.layout.margin.t or 50, b=50), template="plotly_white")
    div = pio.to_html(fig, full_html=False, include_plotlyjs=False, div_id=f"plot-{section}",
                      config={"displaylogo": False, "responsive": True})
    return f'<div class="wml-plot" data-section="{html.escape(section)}">{div}</div>'


def _layout_figure(go, a: Analysis):
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
    fig = go.Figure(go.Heatmap(
        z=z, x=[f"local {i}" for i in range(width)], y=[node_name[n] for n in nodes], text=text,
        texttemplate="%{text}" if len(recs.ranks) <= 64 else None,
        hovertemplate="%{y}<br>%{text}<br>" + ("compute %{z:.1f} ms" if timed else "") + "<extra></extra>",
        colorscale="Blues", colorbar=dict(title="compute ms" if timed else "rank"), xgap=2, ygap=2))
    fig.update_layout(title=f"layout: {len(nodes)} node(s) x {width} rank(s), coloured by "
                            + ("compute per step" if timed else "rank (too few steps to time)"),
                      height=max(260, 60 + 40 * len(nodes)) if len(nodes) <= 40 else 900)
    fig.update_yaxes(autorange="reversed")
    return fig


def _ranks_figure(go, a: Analysis):
    rows = [r for r in a.rows if r.step_ms is not None]
    x = [r.rank for r in rows]
    wait = [r.wait_ms or 0.0 for r in rows]
    comm = [max((r.comm_ms or 0.0) - (r.wait_ms or 0.0), 0.0) for r in rows]
    compute = [r.compute_ms or 0.0 for r in rows]
    hover = [f"rank {r.rank} on {html.escape(r.node)}" for r in rows]
    fig = go.Figure([
        go.Bar(name="compute", x=x, y=compute, marker_color=COLORS["compute"], hovertext=hover),
        go.Bar(name="communication (transfer)", x=x, y=comm, marker_color=COLORS["comm"], hovertext=hover),
        go.Bar(name="waiting for the last rank", x=x, y=wait, marker_color=COLORS["wait"], hovertext=hover),
    ])
    for s in a.stragglers:
        fig.add_annotation(x=s.rank, y=next(r.step_ms for r in rows if r.rank == s.rank),
                           text=f"straggler: rank {s.rank}<br>{html.escape(s.node)} {s.excess_pct:+.0f} %",
                           showarrow=True, arrowhead=2, font=dict(color=COLORS["straggler"]))
    fig.update_layout(barmode="stack", title="per rank: a step's time (mean, ms)", xaxis_title="rank",
                      yaxis_title="ms per step", height=420, legend=dict(orientation="h", y=-0.2))
    return fig


def _steps_figure(go, a: Analysis):
    """Compute per step, over the steps every rank kept: the median rank, the band of all ranks,
    and each straggler."""
    from .analysis import _aligned

    aligned = _aligned(a.records.ranks)
    if aligned is None:
        return None
    compute = aligned[0] * 1e3
    first = max(r.ring_first_step for r in a.records.ranks)
    first = max(first, 1) if compute.shape[1] > 1 or first else first
    steps = list(range(first, first + compute.shape[1]))
    fig = go.Figure([
        go.Scatter(x=steps, y=compute.max(axis=0).tolist(), name="slowest rank", line=dict(color="#bbbbbb")),
        go.Scatter(x=steps, y=np.median(compute, axis=0).tolist(), name="median rank", line=dict(color=COLORS["compute"])),
        go.Scatter(x=steps, y=compute.min(axis=0).tolist(), name="fastest rank", line=dict(color="#dddddd")),
    ])
    index = {r.rank: i for i, r in enumerate(a.records.ranks)}
    for s in a.stragglers[:5]:
        fig.add_trace(go.Scatter(x=steps, y=compute[index[s.rank]].tolist(), name=f"rank {s.rank} ({s.node})",
                                 line=dict(color=COLORS["straggler"])))
    fig.update_layout(title="compute per step (ms), the last steps kept by every rank", xaxis_title="step",
                      yaxis_title="ms", height=380)
    return fig


def _segments_figure(go, rep: Report):
    rows = []
    for p in rep.parts:
        if p.submitted and p.started:
            rows.append((p.label, "queued", p.submitted, p.started, p.state))
        if p.started and p.ended:
            rows.append((p.label, "ran", p.started, p.ended, p.state))
    if not rows:
        return None
    t0 = min(r[2] for r in rows)
    fig = go.Figure()
    for what, color in (("queued", "#c7c7c7"), ("ran", COLORS["compute"])):
        sel = [r for r in rows if r[1] == what]
        if not sel:
            continue
        fig.add_trace(go.Bar(
            name=what, orientation="h", y=[r[0] for r in sel], x=[(r[3] - r[2]) / 60 for r in sel],
            base=[(r[2] - t0) / 60 for r in sel], marker_color=color,
            hovertext=[f"{r[0]} {what} {stamp(r[2])} to {stamp(r[3])} UTC ({r[4]})" for r in sel]))
    for p in rep.parts:
        if p.ended and p.step is not None:
            fig.add_annotation(x=(p.ended - t0) / 60, y=p.label, text=f"step {p.step}", showarrow=False, xanchor="left")
    fig.update_layout(title=f"segments over time (minutes from {stamp(t0)} UTC)", barmode="overlay",
                      xaxis_title="minutes", height=max(240, 80 + 50 * len(rep.parts)))
    fig.update_yaxes(autorange="reversed")
    return fig


def _sweep_figure(go, rep: Report):
    from plotly.subplots import make_subplots

    names = sorted({k for p in rep.parts for k in p.params})
    scored = [p for p in rep.parts if p.metrics and isinstance(p.metrics.get(rep.metric), (int, float))]
    if not names or not scored or rep.metric is None:
        return None
    fig = make_subplots(rows=1, cols=len(names), subplot_titles=names, shared_yaxes=True)
    best = {id(p) for p in best_trials(rep, 1)}
    for i, name in enumerate(names, start=1):
        xs = [_value(p.params.get(name)) for p in scored]
        fig.add_trace(go.Scatter(
            x=xs, y=[p.metrics[rep.metric] for p in scored], mode="markers", name=name, showlegend=False,
            marker=dict(size=[14 if id(p) in best else 9 for p in scored],
                        color=[COLORS["straggler"] if id(p) in best else COLORS["compute"] for p in scored]),
            hovertext=[f"{p.label}: " + ", ".join(f"{k}={v}" for k, v in p.params.items()) for p in scored]),
            row=1, col=i)
        if all(isinstance(x, (int, float)) for x in xs) and len(set(xs)) > 2 and min(xs) > 0 and max(xs) / min(xs) >= 100:
            fig.update_xaxes(type="log", row=1, col=i)
    fig.update_yaxes(title_text=rep.metric, row=1, col=1)
    fig.update_layout(title=f"{rep.metric} against each parameter ({'largest' if rep.maximize else 'smallest'} is best; "
                            f"the best trial in red)", height=440, margin=dict(t=90))
    return fig


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
    go, pio, get_plotlyjs = _plotly()
    sections: List[str] = []
    main: Optional[Part] = rep.main
    if rep.kind == "chain":
        rows = [[p.label, p.state, stamp(p.submitted), stamp(p.started), stamp(p.ended),
                 "-" if p.step is None else str(p.step), p.line] for p in rep.parts]
        fig = _segments_figure(go, rep)
        sections.append("<h2>Segments</h2>" + (_figure_html(pio, fig, "segments") if fig else
                                                "<p>No segment has started yet.</p>")
                        + _table(["segment", "state", "submitted (UTC)", "ran from", "to", "step", "summary"], rows))
    if rep.kind == "sweep":
        fig = _sweep_figure(go, rep)
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
        sections.append(f"<h2>Layout{where}</h2>" + _figure_html(pio, _layout_figure(go, a), "layout"))
        if a.step_ms is None:
            sections.append(f"<h2>Ranks{where}</h2><p>{html.escape(main.line)}: no step time per rank to show.</p>")
        else:
            sections.append(f"<h2>Ranks{where}</h2>" + _figure_html(pio, _ranks_figure(go, a), "ranks"))
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
        steps = _steps_figure(go, a)
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
