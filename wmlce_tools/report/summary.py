"""The terminal summary of ``wml report`` (rich): the run in one line, its parts, the stragglers
named with their node, the ranks (all of them up to `RANK_ROWS`, else the slowest and the
fastest), a sweep's best trials and a chain's segments."""
from __future__ import annotations

import io
from typing import List, Optional

from rich.console import Console
from rich.table import Table

from ..runstats.analysis import Analysis, RankRow, partial_note
from .run import Part, Report, best_trials, stamp

RANK_ROWS = 16


def _ms(v: Optional[float]) -> str:
    if v is None:
        return "-"
    return f"{v:.0f}" if v >= 100 else f"{v:.1f}" if v >= 1 else f"{v:.2f}"


def _bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"   # pragma: no cover


def _rank_rows(a: Analysis) -> List[RankRow]:
    rows = a.rows
    if len(rows) <= RANK_ROWS:
        return rows
    timed = sorted((r for r in rows if r.compute_ms is not None), key=lambda r: -r.compute_ms)
    half = RANK_ROWS // 2
    keep = {r.rank for r in timed[:half]} | {r.rank for r in timed[-half:]}
    return [r for r in rows if r.rank in keep]


def _ranks_table(part: Part) -> Table:
    a = part.analysis
    straggling = {s.rank for s in a.stragglers}
    shown = _rank_rows(a)
    more = f" ({len(shown)} of {len(a.rows)}: the slowest and the fastest)" if len(shown) < len(a.rows) else ""
    t = Table(title=f"{part.label}: per rank, mean of a step (ms){more}", title_justify="left")
    for name, right in (("rank", True), ("node", False), ("steps", True), ("step", True), ("compute", True),
                        ("in comm.", True), ("waiting for last", True), ("", False)):
        t.add_column(name, justify="right" if right else "left", no_wrap=not right)
    for r in shown:
        mark = "straggler" if r.rank in straggling else ("" if r.status == "finished" else r.status)
        t.add_row(str(r.rank), r.node, str(r.steps), _ms(r.step_ms), _ms(r.compute_ms), _ms(r.comm_ms),
                  _ms(r.wait_ms), mark, style="bold red" if r.rank in straggling else None)
    return t


def _stragglers(console: Console, a: Analysis) -> None:
    if not a.stragglers:
        if len(a.rows) > 1 and a.median_compute_ms is not None:
            console.print(f"stragglers: none (no rank's compute is more than 10 % above the median, "
                          f"{_ms(a.median_compute_ms)} ms)")
        return
    for s in a.stragglers:
        console.print(f"[bold red]straggler[/]: rank {s.rank} on {s.node}: compute {_ms(s.compute_ms)} ms a step, "
                      f"{s.excess_pct:+.0f} % on the median rank; the others waited {_ms(s.others_wait_ms)} ms a step "
                      f"for it ({s.others_wait_s:.1f} s each over the run)")


def _extras(console: Console, part: Part) -> None:
    recs = part.records
    peaks = [r.gpu_peak_bytes for r in recs.ranks if r.gpu_peak_bytes]
    if peaks:
        console.print(f"GPU memory peak: {max(peaks) / 2**30:.2f} GiB (rank {max(recs.ranks, key=lambda r: r.gpu_peak_bytes or 0).rank})")
    lms = [r.lms for r in recs.ranks if r.lms]
    if lms:
        l0 = lms[0]
        console.print(f"LMS (rank {recs.ranks[0].rank}): {l0.get('steps')} steps, swapped "
                      f"{(l0.get('swapped_bytes') or 0) / 2**20:.1f} MB, recomputed {(l0.get('recomputed_bytes') or 0) / 2**20:.1f} MB a step, "
                      f"{(l0.get('wait_s') or 0) * 1e3:.1f} ms waiting on late copies; plan: {l0.get('plan')}")
    total = sum(r.bytes_reduced for r in recs.ranks)
    if total:
        console.print(f"reduced: {_bytes(recs.ranks[0].bytes_reduced)} per rank ({_bytes(total)} in all)")


def _attempts(console: Console, part: Part) -> None:
    """ddlrun --restarts: the attempts, one line, and what failed in each (runstats/attempts.py)."""
    from ..runstats.attempts import load

    job_dir = part.directory.parent if part.directory.name == "stats" else part.directory
    rec = load(job_dir)
    if rec is None or (len(rec.attempts) == 1 and rec.attempts[0].outcome != "failed"):
        return
    console.print(f"attempts: {rec.one_line()}", markup=False, highlight=False)
    for a in rec.attempts:
        for f in a.faults:
            console.print(f"  attempt {a.index} ({','.join(a.nodes)}): {f.describe()}", markup=False, highlight=False)


def _part_detail(console: Console, part: Part) -> None:
    a = part.analysis
    console.print(f"[bold]{part.label}[/]: {part.line}")
    _attempts(console, part)
    _stragglers(console, a)
    console.print(_ranks_table(part))
    _extras(console, part)


def _segments(console: Console, rep: Report) -> None:
    t = Table(title="segments", title_justify="left")
    for name in ("segment", "state", "submitted (UTC)", "ran from", "to", "step", "summary"):
        t.add_column(name)
    for p in rep.parts:
        t.add_row(p.label, p.state, stamp(p.submitted), stamp(p.started), stamp(p.ended),
                  "-" if p.step is None else str(p.step), p.line)
    console.print(t)


def _trials(console: Console, rep: Report) -> None:
    names = sorted({k for p in rep.parts for k in p.params})
    best = best_trials(rep)
    if rep.metric is None:
        console.print("metrics: no trial printed a JSON object of numbers yet (its rank 0's last such line)")
    else:
        t = Table(title=f"best trials by {rep.metric} ({'largest' if rep.maximize else 'smallest'} first)",
                  title_justify="left")
        for name in ("trial", *names, rep.metric, "state", "step (ms)"):
            t.add_column(name)
        for p in best:
            a = p.analysis
            t.add_row(p.label.split()[-1], *[str(p.params.get(n, "")) for n in names], f"{p.metrics[rep.metric]:.6g}",
                      p.state, _ms(a.step_ms) if a else "-")
        console.print(t)
    counts = {}
    for p in rep.parts:
        counts[p.state] = counts.get(p.state, 0) + 1
    no_records = [p.label.split()[-1] for p in rep.parts if p.records is None]
    console.print(f"trials: {', '.join(f'{n} {s.lower()}' for s, n in counts.items())}"
                  + (f"; without run records: {', '.join(no_records[:20])}" if no_records else ""))


def print_report(rep: Report, console: Console) -> None:
    console.print(f"[bold]{rep.title}[/]")
    for note in rep.notes:
        console.print(note)
    if rep.kind == "chain":
        _segments(console, rep)
    elif rep.kind == "sweep":
        _trials(console, rep)
    main = rep.main
    if main is None:
        return
    if rep.kind == "job" and main.records is not None and main.records.partial:
        console.print(f"[bold yellow]partial record[/]{partial_note(main.records)}")
    if rep.kind != "job":
        console.print(f"ranks of {main.label}" + (" (the best trial with records)" if rep.kind == "sweep" else
                                                 " (the last segment with records)"))
    _part_detail(console, main)


def render_text(rep: Report, width: int = 120) -> str:
    buf = io.StringIO()
    print_report(rep, Console(file=buf, width=width, no_color=True, highlight=False, soft_wrap=False))
    return buf.getvalue()
