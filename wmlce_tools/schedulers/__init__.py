"""Schedulers, registered by name: each module knows its template, how to submit a script,
how to read the submit reply, and (for the job lifecycle) how to ask for status and cancel.
The site profile's ``scheduler`` picks one."""
from __future__ import annotations

import abc
from pathlib import Path
from typing import Dict, List, Optional, Tuple, Type

from ..errors import WmlError


class Scheduler(abc.ABC):
    """Base: what every scheduler module provides."""

    name: str = ""
    template: str = ""
    submit_tool: str = ""
    #: shown when ``submit_tool`` is not on PATH
    missing_hint: str = ""
    #: script passed on stdin (``bsub < script``) instead of as an argument
    submit_via_stdin: bool = False

    @abc.abstractmethod
    def submit_argv(self, script: Path) -> List[str]:
        """argv that submits ``script``."""

    @abc.abstractmethod
    def parse_submit(self, stdout: str) -> str:
        """The job id in the submit command's reply (WmlError when there is none)."""

    def interactive_argv(self, directives: List[str]) -> Optional[List[str]]:
        """Command for an interactive allocation with the same resources, or None."""
        return None

    @abc.abstractmethod
    def output_paths(self, jobdir: Path, job_name: str) -> Tuple[str, str]:
        """Default stdout/stderr paths as the scheduler's directive reads them."""

    def expand_output(self, pattern: str, job_id: str) -> str:
        """An output path pattern with this job's id filled in (to find the logs later)."""
        return pattern


_REGISTRY: Dict[str, Type[Scheduler]] = {}


def register(cls: Type[Scheduler]) -> Type[Scheduler]:
    _REGISTRY[cls.name] = cls
    return cls


def get_scheduler(name: str) -> Scheduler:
    try:
        return _REGISTRY[name]()
    except KeyError:
        raise WmlError(f"unknown scheduler {name!r}; known: {', '.join(sorted(_REGISTRY))}") from None


def names() -> List[str]:
    return sorted(_REGISTRY)


from . import cobalt, local, lsf, slurm  # noqa: E402,F401  (register themselves)
