"""Open MPI's ``--tag-output``, undone: each rank's lines whole again.

Open MPI's forwarder reads a rank's output in chunks that may end mid-line and writes each
chunk to mpiexec's stdout (stderr) as it comes, so a long line of one rank can be cut by
another rank's chunk (MPICH's Hydra forwards whole lines; the shim writes each line in one
write, which is not enough here).  With ``--tag-output`` every chunk starts with a tag naming
its rank, ``[JOB,RANK]<stdout>:`` (Open MPI 4, ORTE's iof_base_output.c; Open MPI 5 writes a
space after the colon, PMIx's iof code), and a tag follows every newline inside a chunk.  So
in what mpiexec writes, a line may hold several chunks, each after its tag: every chunk but
the last one of the line ended mid-line.  ``Untagger`` keeps each rank's unfinished line and
gives back whole lines without the tags; text before the first tag of a line (mpiexec's own
messages) passes as it is.  mpiexec's own message may also come right after a chunk that ended
mid-line, on the same line: its help messages start with a rule of 74 dashes (opal_show_help,
as "Primary job terminated normally, but 1 process returned a non-zero exit code" does when a
rank fails while the others still print), so a rank's text that ends in that rule, after text
of the rank's own on the line, is the rank's unfinished line followed by mpiexec's message.
"""
from __future__ import annotations

import re
from typing import IO, Dict, Iterator, List, Optional, Tuple

TAG = re.compile(rb"\[[^\[\],\s]+,(\d+)\]<(stdout|stderr|stddiag)>:")
RULE = b"-" * 74 + b"\n"        # the first line of Open MPI's help messages (opal_show_help)
STYLES = ("orte", "pmix")     # Open MPI 4 (no space after the tag's colon), Open MPI 5 (a space)


def tag_style(version_text: str) -> str:
    """The tag's form for the Open MPI whose ``mpiexec --version`` printed ``version_text``."""
    m = re.search(r"(\d+)\.\d+", version_text)
    return "pmix" if m and int(m.group(1)) >= 5 and "openrte" not in version_text.lower() else "orte"


class Untagger:
    """Feed it mpiexec's output line by line (``feed``); it returns the ranks' whole lines."""

    def __init__(self, style: str = "orte") -> None:
        if style not in STYLES:
            raise ValueError(f"tag style {style!r}: expected one of {STYLES}")
        self._space = style == "pmix"
        self._open: Dict[Tuple[bytes, int], bytes] = {}   # (stream, rank) -> its unfinished line

    def feed(self, line: bytes) -> List[bytes]:
        first = TAG.match(line)
        if (first is not None and line.endswith(b"\n") and line.find(b"]<", first.end()) < 0
                and not line.endswith(RULE) and (first.group(2), int(first.group(1))) not in self._open):
            # the common line: one rank's whole line
            start = first.end() + (1 if self._space and line[first.end():first.end() + 1] == b" " else 0)
            return [line[start:]]
        tags = list(TAG.finditer(line))
        if not tags:
            return [line]
        out = [line[:tags[0].start()] + b"\n"] if tags[0].start() else []
        for i, tag in enumerate(tags):
            start = tag.end()
            if self._space and line[start:start + 1] == b" ":
                start += 1
            end = tags[i + 1].start() if i + 1 < len(tags) else len(line)
            key = (tag.group(2), int(tag.group(1)))
            own = line[start:end]
            last = end == len(line) and line.endswith(b"\n")
            if last and own.endswith(RULE) and len(own) > len(RULE):   # mpiexec's message after a cut chunk
                self._open[key] = self._open.pop(key, b"") + own[:-len(RULE)]
                out.append(RULE)
                continue
            text = self._open.pop(key, b"") + own
            if last:
                out.append(text)
            else:
                self._open[key] = text        # the chunk ended mid-line: the rest comes later
        return out

    def finish(self) -> List[bytes]:
        """The lines still unfinished when the stream ended, each with a newline."""
        out = [text + b"\n" for text in self._open.values()]
        self._open.clear()
        return out


def whole_lines(src: IO[bytes], style: Optional[str]) -> Iterator[bytes]:
    """The lines of ``src``; with a tag ``style``, the ranks' lines reassembled (``Untagger``)."""
    if style is None:
        yield from iter(src.readline, b"")
        return
    untag = Untagger(style)
    for line in iter(src.readline, b""):
        yield from untag.feed(line)
    yield from untag.finish()
