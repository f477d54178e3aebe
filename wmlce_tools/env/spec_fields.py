"""Fields every kind of env spec shares (conda and PyPI): lists of strings, where the stack
comes from (``source``, ``checked``, ``legacy``), and the check that a spec does not mix
accelerator builds (two CUDA majors, or CUDA with ROCm/XPU).  ``data``/``where`` are spec.py's
line-numbered mapping and its error helper."""
from __future__ import annotations

import re
from typing import Any

from wmlce_tools.errors import WmlError


def str_list(data: Any, key: str, where: Any, required: bool = False) -> list[str]:
    value = data.get(key)
    line = data.lines.get(key)
    if value is None:
        if required:
            raise where.error(None, f"missing {key!r}")
        return []
    if not isinstance(value, list) or not all(isinstance(v, (str, int, float)) for v in value):
        raise where.error(line, f"{key!r} must be a list of strings")
    return [str(v) for v in value]


def provenance(data: Any, where: Any) -> dict[str, Any]:
    """``source``, ``checked`` (a date) and ``legacy`` of a curated spec."""
    origin, checked, legacy = data.get("source", ""), data.get("checked", ""), data.get("legacy", False)
    if not isinstance(origin, str):
        raise where.error(data.lines.get("source"), "'source' must be the page or repository the stack comes from")
    if checked and not re.fullmatch(r"\d{4}-\d{2}-\d{2}", str(checked)):
        raise where.error(data.lines.get("checked"), f"'checked' must be a date YYYY-MM-DD, got {checked!r}")
    if not isinstance(legacy, bool):
        raise where.error(data.lines.get("legacy"), "'legacy' must be true or false")
    return {"origin": origin, "checked": str(checked or ""), "legacy": legacy}


# ---------------------------------------------------------------- accelerator builds

_CUDA_PATTERNS = (
    re.compile(r"^(?:cudatoolkit|cuda-version|cuda-runtime|cuda-cudart|__cuda)[ =<>~!]*=?\s*(\d+)"),
    re.compile(r"\bcuda(\d\d)\d"),              # build strings: cuda126_..., cuda118*
    re.compile(r"\+cu(\d\d)\d"),                 # wheels: torch==2.1.0+cu121
    re.compile(r"/whl/cu(\d\d)\d"),              # PyTorch's index: .../whl/cu121
    re.compile(r"^nvidia-[a-z0-9-]+-cu(\d\d)\b"),  # NVIDIA's wheels: nvidia-cublas-cu12, nvidia-cuda-runtime-cu11
    re.compile(r"(?<![a-z0-9])cuda(\d\d)(?:x(?![a-z0-9])|[-_\]])"),   # cupy-cuda12x, jax[cuda12], jax-cuda12-plugin,
                                                                  # conda-forge's build strings cuda12x_*
)


def accelerator_builds(spec: Any) -> dict[str, set[str]]:
    """The accelerator builds a spec's packages, pip requirements, indexes and ``__cuda`` name:
    ``{"CUDA 12": {...texts}, "ROCm": {...}, "XPU": {...}}``."""
    out: dict[str, set[str]] = {}
    texts = [p.spec for p in getattr(spec, "packages", [])]
    texts += list(getattr(spec, "pip", [])) + list(getattr(spec, "requirements", []))
    texts += [u for u in (getattr(spec, "pip_index", None), getattr(spec, "index", None)) if u]
    texts += [f"__cuda {v}" for k, v in getattr(spec, "virtual_packages", {}).items() if k == "__cuda"]
    for text in texts:
        low = text.lower()
        for pat in _CUDA_PATTERNS:
            for m in pat.finditer(low):
                major = m.group(1).lstrip("0") or "0"
                out.setdefault(f"CUDA {major}", set()).add(text)
        if "rocm" in low:
            out.setdefault("ROCm", set()).add(text)
        if re.search(r"(/whl/xpu\b|\+xpu\b)", low):
            out.setdefault("XPU", set()).add(text)
    return out


def check_cuda_builds(spec: Any, where: str) -> None:
    """A spec naming two CUDA major versions (or CUDA and ROCm/XPU builds) cannot be installed:
    the packages link against different runtimes."""
    builds = accelerator_builds(spec)
    if len(builds) > 1:
        kinds = sorted(builds)
        a, b = kinds[0], kinds[1]
        raise WmlError(f"{where}: spec {spec.name!r} mixes incompatible accelerator builds: {a} "
                       f"({', '.join(sorted(builds[a]))}) and {b} ({', '.join(sorted(builds[b]))})")
