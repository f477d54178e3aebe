"""The terminal summary of ``wml report`` (rich): what ran in one line, a chain's segments or a
sweep's trials (every one, as ``wml sweep show`` lists them), the stragglers named with their
node, the ranks (all of them up to `RANK_ROWS`, else the slowest and the fastest).

Readable at 80 columns: prose is wrapped here, never between a number and its unit ("+137 %"),
and tables have no empty column."""
from __future__ import annotations

import io
import re
import textwrap
from typing import List, Optional

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..runstats.analysis import STRAGGLER_PCT, Analysis, RankRow, partial_note
from ..runs.sweep_view import cell
from .run import Part, Report, best_trials, duration, stamp

RANK_ROWS = 16
_UNIT = re.compile(r"(?<=[\d)]) (?=(%|(ms|us|s|min|h|B|KiB|MiB|GiB|UTC)\b))|(?<=\d\d-\d\d) (?=\d\d:)")
_KEEP = "\u00a0"    # textwrap breaks only at ASCII whitespace: a number keeps its unit


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


def say(console: Console, text: str, style: Optional[str] = None, indent: str = "  ") -> None:
    """`text` wrapped to the console's width (later lines indented), a number never parted from
    its unit; each line printed as it is (rich wraps nothing)."""
    width = max(20, console.width)
    lines = textwrap.wrap(_UNIT.sub(_KEEP, text), width=width, subsequent_indent=indent, break_long_words=True,
                          break_on_hyphens=False) or [""]
    for line in lines:
        console.print(Text(line.replace(_KEEP, " "), style=style or ""), soft_wrap=True)


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
    more = f", {len(shown)} of {len(a.rows)}: the slowest and the fastest" if len(shown) < len(a.rows) else ""
    notes = {r.rank: "straggler" if r.rank in straggling else ("" if r.status == "finished" else r.status)
             for r in shown}
    t = Table(title=f"{part.label}: per rank, ms a step{more}", title_justify="left",
              caption="waiting: for the last rank to arrive, part of in comm." + ("" if a.wait_measured else
                                                                                  " (inferred: not measured)"),
              caption_justify="left")
    columns = [("rank", True), ("node", False), ("steps", True), ("step", True), ("compute", True),
               ("in comm.", True), ("waiting", True)]
    if any(notes.values()):
        columns.append(("note", False))
    for name, right in columns:
        t.add_column(name, justify="right" if right else "left", no_wrap=name != "node", overflow="fold")
    for r in shown:
        cells = [str(r.rank), r.node, str(r.steps), _ms(r.step_ms), _ms(r.compute_ms), _ms(r.comm_ms), _ms(r.wait_ms)]
        if len(columns) > 7:
            cells.append(notes[r.rank])
        t.add_row(*cells, style="bold red" if r.rank in straggling else None)
    return t


def _stragglers(console: Console, a: Analysis) -> None:
    if not a.stragglers:
        if len(a.rows) > 1 and a.median_compute_ms is not None:
            say(console, f"stragglers: none (no rank's compute is more than {STRAGGLER_PCT:.0f} % above the median "
                         f"of the other ranks'; the median rank's is {_ms(a.median_compute_ms)} ms)")
        return
    for s in a.stragglers:
        say(console, f"straggler: rank {s.rank} on {s.node}: compute {_ms(s.compute_ms)} ms a step, "
                     f"{s.excess_pct:+.0f} % on the others' median ({_ms(s.others_ms)} ms); the others waited "
                     f"{_ms(s.others_wait_ms)} ms a step for it ({s.others_wait_s:.1f} s each over the run)",
            style="bold red")


def _extras(console: Console, part: Part) -> None:
    recs = part.records
    peaks = [r.gpu_peak_bytes for r in recs.ranks if r.gpu_peak_bytes]
    if peaks:
        say(console, f"GPU memory peak: {max(peaks) / 2**30:.2f} GiB "
                     f"(rank {max(recs.ranks, key=lambda r: r.gpu_peak_bytes or 0).rank})")
    lms = [r.lms for r in recs.ranks if r.lms]
    if lms:
        l0 = lms[0]
        say(console, f"LMS (rank {recs.ranks[0].rank}): {l0.get('steps')} steps, swapped "
                     f"{(l0.get('swapped_bytes') or 0) / 2**20:.1f} MB, recomputed "
                     f"{(l0.get('recomputed_bytes') or 0) / 2**20:.1f} MB a step, "
                     f"{(l0.get('wait_s') or 0) * 1e3:.1f} ms waiting on late copies; plan: {l0.get('plan')}")
    total = sum(r.bytes_reduced for r in recs.ranks)
    if total:
        say(console, f"reduced: {_bytes(recs.ranks[0].bytes_reduced)} per rank ({_bytes(total)} in all)")


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
    say(console, f"{part.label}: {part.line}")
    _attempts(console, part)
    _stragglers(console, a)
    console.print(_ranks_table(part))
    _extras(console, part)


def _segments(console: Console, rep: Report) -> None:
    t = Table(title="segments", title_justify="left")
    for name in ("segment", "state", "exit", "ran from (UTC)", "for", "step reached", "last checkpoint"):
        t.add_column(name, overflow="fold")
    for p in rep.parts:
        ran = duration(p.ended - p.started) if p.started and p.ended else "-"
        t.add_row(p.label.split()[-1], p.state, cell(p.exit_code), stamp(p.started), ran,
                  cell(p.step_reached), cell(p.checkpoint))
    console.print(t)
    main = rep.main
    for p in rep.parts:
        if p.analysis is not None and p is not main:      # the main segment's line comes with its ranks
            say(console, f"{p.label}: {p.line}")


def _trials(console: Console, rep: Report) -> None:
    t = Table(title=f"trials ({len(rep.parts)})", title_justify="left")
    for c in rep.columns:
        t.add_column(c, justify="right" if c in ("trial", "exit", "walltime_s") else "left", overflow="fold",
                     no_wrap=c in ("trial", "state", "exit"))      # COMPLETED whole at 80 columns; the rest folds
    for r in rep.rows:
        t.add_row(*[cell(r.get(c)) for c in rep.columns])
    console.print(t)
    best = best_trials(rep)
    if rep.metric is None:
        say(console, "best: none: no trial printed a JSON object of numbers (its rank 0's last such line) yet")
    elif not best:
        say(console, f"best: none: no completed trial has {rep.metric}")
    else:
        way = "largest" if rep.maximize else "smallest"
        say(console, f"best by {rep.metric} ({way} first, completed trials): " + ", ".join(
            f"trial {p.label.split()[-1]} ({p.metrics[rep.metric]:.6g})" for p in best))
    no_records = [p.label.split()[-1] for p in rep.parts if p.records is None]
    if no_records:
        say(console, f"without run records: trial{'s' if len(no_records) > 1 else ''} {', '.join(no_records[:20])}"
                     + (" ..." if len(no_records) > 20 else ""))


def print_report(rep: Report, console: Console) -> None:
    say(console, f"{rep.title}: {rep.run.line()}", style="bold")
    for note in rep.notes:
        say(console, note)
    if rep.kind == "chain":
        _segments(console, rep)
    elif rep.kind == "sweep":
        _trials(console, rep)
    main = rep.main
    if main is None:
        return
    if rep.kind == "job" and main.records is not None and main.records.partial:
        say(console, f"partial record{partial_note(main.records)}", style="bold yellow")
    if rep.kind != "job":
        say(console, f"ranks of {main.label} ({rep.main_why})")
    _part_detail(console, main)


def render_text(rep: Report, width: int = 120) -> str:
    buf = io.StringIO()
    print_report(rep, Console(file=buf, width=width, no_color=True, highlight=False, soft_wrap=False))
    return buf.getvalue()
