"""A report page opened in Debian's headless Chromium, as a user's browser would: a screenshot
kept beside it, and the DOM after plotly ran, to tell that every plot drew data."""
from __future__ import annotations

import re
import shutil
import struct
import subprocess
from pathlib import Path
from typing import Dict

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--virtual-time-budget=8000"]
# a bar (<g class="point"><path d="M...">), a marker (<path class="point" ... d="M...">), a drawn line
# (<path class="js-line" d="M...L...">), a heatmap's picture (<g class="hm"><image ... xlink:href="data:...">)
_MARKS = re.compile(r'<g class="point"><path d="(M[^"]*\d[^"]*)"|<path class="point"[^>]* d="(M[^"]*\d[^"]*)"'
                    r'|<path class="js-line" d="(M[^"]*L[^"]*)"'
                    r'|<g class="hm"><image [^>]*xlink:href="(data:image/png;base64,[^"]{200,})"')


def _chromium(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    assert CHROMIUM, "chromium is not installed (scripts/test installs Debian's chromium)"
    return subprocess.run([CHROMIUM, *_FLAGS, *args], capture_output=True, text=True, timeout=timeout)


def screenshot(page: Path, png: Path, height: int = 2600) -> tuple:
    """The page drawn at 1200 x height; returns the PNG's (width, height)."""
    proc = _chromium(f"--window-size=1200,{height}", f"--screenshot={png}", page.as_uri())
    assert png.is_file(), proc.stderr[-2000:]
    head = png.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    return struct.unpack(">II", head[16:24])


def drawn(page: Path) -> Dict[str, int]:
    """section -> how many data marks (bars, markers, drawn lines, heatmap images) its plot holds,
    counted in the DOM after the page's scripts ran."""
    dom = _chromium("--dump-dom", page.as_uri()).stdout
    starts = [(m.start(), m.group(1)) for m in re.finditer(r'<div class="wml-plot" data-section="([\w-]+)"', dom)]
    out = {}
    for i, (at, name) in enumerate(starts):
        end = starts[i + 1][0] if i + 1 < len(starts) else len(dom)
        chunk = dom[at:end]
        out[name] = sum(1 for _ in _MARKS.finditer(chunk))
    return out
