"""Which hosts this job runs on, and how many slots each has.

In order: ``-H h1,h2`` (``h1:4`` or ``h1 slots=4`` give slots), ``--hostfile FILE`` (one host
per line, ``host``, ``host:N`` or ``host slots=N``; a host repeated N times is N slots, as in
LSF's LSB_DJOB_HOSTFILE), then the scheduler's variables:

- LSF: ``LSB_DJOB_HOSTFILE`` (one line per slot) else ``LSB_MCPU_HOSTS`` (``host count ...``);
  the first host is the launch/batch node when it has fewer slots than the compute hosts
  (Summit: ``batch1 1 h41n01 42 h41n02 42``) and is left out.
- Slurm: ``SLURM_JOB_NODELIST`` (hostlist syntax) with ``SLURM_TASKS_PER_NODE`` as slots.
- Cobalt: ``COBALT_NODEFILE`` else ``COBALT_PARTNAME`` (node ids ``3820-3823,3900`` ->
  ``nid03820``...), at most ``COBALT_JOBSIZE`` hosts.
- PBS Pro: ``PBS_NODEFILE`` (one line per chunk, a node listed again for each MPI slot it
  was given: the distinct hosts in order; slots are left to the layout).
- else this machine (``localhost``).
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import List, Mapping, Optional, Sequence, Tuple

from ..errors import WmlError
from .hostlist import expand_counts, expand_hostlist

LOCALHOST = "localhost"
_HOST = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")
_SLOTS = re.compile(r"^(?:slots|max_slots|max-slots)=(\d+)$")


@dataclass(frozen=True)
class HostSet:
    """Hosts in allocation order; ``slots[i]`` is None when the source does not say."""

    hosts: Tuple[str, ...]
    slots: Tuple[Optional[int], ...]
    source: str                      # where they came from, for -v and errors

    def __post_init__(self) -> None:
        if not self.hosts:
            raise WmlError(f"no hosts found ({self.source})")
        if len(self.slots) != len(self.hosts):
            raise WmlError(f"{self.source}: {len(self.hosts)} hosts but {len(self.slots)} slot counts")

    @property
    def is_local(self) -> bool:
        return self.hosts == (LOCALHOST,)

    def first(self, n: int) -> "HostSet":
        return HostSet(self.hosts[:n], self.slots[:n], self.source)


def _check_host(name: str, where: str) -> str:
    if not _HOST.match(name):
        raise WmlError(f"{where}: {name!r} is not a host name")
    return name


def _merge(entries: Sequence[Tuple[str, Optional[int]]], source: str) -> HostSet:
    """Hosts in first-seen order; a host listed again adds its slots (or one slot)."""
    order: List[str] = []
    slots: dict = {}
    for host, n in entries:
        if host not in slots:
            order.append(host)
            slots[host] = n
        else:
            prev = slots[host] if slots[host] is not None else 1
            slots[host] = prev + (n if n is not None else 1)
    return HostSet(tuple(order), tuple(slots[h] for h in order), source)


def _host_entry(text: str, where: str) -> Tuple[str, Optional[int]]:
    """``host``, ``host:N`` or ``host slots=N``."""
    words = text.split()
    name, n = words[0], None
    if ":" in name:
        name, _, count = name.partition(":")
        if not count.isdigit() or int(count) < 1:
            raise WmlError(f"{where}: {text!r}: slots after ':' must be a positive integer")
        n = int(count)
    for word in words[1:]:
        m = _SLOTS.match(word)
        if not m or int(m.group(1)) < 1:
            raise WmlError(f"{where}: {text!r}: expected 'host', 'host:N' or 'host slots=N'")
        n = int(m.group(1))
    return _check_host(name, where), n


def parse_host_option(text: str) -> HostSet:
    """``-H h1,h2`` / ``-H h1:2,h2:2`` / ``-H 'nid[01-04]'``."""
    entries = []
    for item in text.split(",") if "[" not in text else [text]:
        item = item.strip()
        if not item:
            raise WmlError(f"-H {text!r}: empty host name")
        if "[" in item:
            entries += [(_check_host(h, f"-H {text!r}"), None) for h in expand_hostlist(item)]
        else:
            entries.append(_host_entry(item, f"-H {text!r}"))
    return _merge(entries, "-H")


def read_hostfile(path: str) -> HostSet:
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        raise WmlError(f"hostfile {path}: no such file") from None
    except IsADirectoryError:
        raise WmlError(f"hostfile {path}: is a directory") from None
    except UnicodeDecodeError:
        raise WmlError(f"hostfile {path}: not a text file (expected one host per line)") from None
    except OSError as e:
        raise WmlError(f"hostfile {path}: cannot read: {e.strerror}") from None
    entries = []
    for i, line in enumerate(lines, 1):
        line = line.split("#", 1)[0].strip()
        if line:
            entries.append(_host_entry(line, f"hostfile {path}:{i}"))
    if not entries:
        raise WmlError(f"hostfile {path} is empty: list one host per line ('host', 'host:N' or 'host slots=N')")
    return _merge(entries, f"hostfile {path}")


def _drop_launch_node(hs: HostSet) -> HostSet:
    """LSF lists the launch/batch node first with fewer slots (Summit: 1 vs 42)."""
    if len(hs.hosts) > 1 and None not in hs.slots and hs.slots[0] < min(hs.slots[1:]):
        return HostSet(hs.hosts[1:], hs.slots[1:], hs.source + " (launch node " + hs.hosts[0] + " left out)")
    return hs


def lsf_hosts(env: Mapping[str, str]) -> HostSet:
    path = env.get("LSB_DJOB_HOSTFILE")
    if path and os.path.exists(path):
        hs = read_hostfile(path)  # one line per slot: a host listed once has 1 slot
        return _drop_launch_node(HostSet(hs.hosts, tuple(s or 1 for s in hs.slots), "LSB_DJOB_HOSTFILE"))
    text = env.get("LSB_MCPU_HOSTS", "").split()
    if not text or len(text) % 2:
        raise WmlError(f"LSB_MCPU_HOSTS={env.get('LSB_MCPU_HOSTS', '')!r}: expected 'host count host count ...'")
    entries = []
    for host, count in zip(text[::2], text[1::2]):
        if not count.isdigit():
            raise WmlError(f"LSB_MCPU_HOSTS: {count!r} after {host!r} is not a slot count")
        entries.append((_check_host(host, "LSB_MCPU_HOSTS"), int(count)))
    return _drop_launch_node(_merge(entries, "LSB_MCPU_HOSTS"))


def slurm_hosts(env: Mapping[str, str]) -> HostSet:
    var = "SLURM_JOB_NODELIST" if env.get("SLURM_JOB_NODELIST") else "SLURM_NODELIST"
    text = env.get(var, "")
    try:
        hosts = expand_hostlist(text)
    except WmlError as e:
        raise WmlError(f"{var}: {e}") from None
    tasks = env.get("SLURM_TASKS_PER_NODE")
    slots: List[Optional[int]] = [None] * len(hosts)
    if tasks:
        try:
            counts = expand_counts(tasks)
        except WmlError as e:
            raise WmlError(f"SLURM_TASKS_PER_NODE: {e}") from None
        if 0 in counts:
            raise WmlError(f"SLURM_TASKS_PER_NODE={tasks!r}: a node with 0 tasks (Slurm gives each node at least 1)")
        if len(counts) != len(hosts):
            raise WmlError(f"SLURM_TASKS_PER_NODE={tasks!r} gives {len(counts)} counts "
                           f"for the {len(hosts)} hosts of SLURM_JOB_NODELIST={text!r}")
        slots = list(counts)
    return HostSet(tuple(hosts), tuple(slots), "SLURM_JOB_NODELIST")


def cobalt_hosts(env: Mapping[str, str]) -> HostSet:
    size_text = env.get("COBALT_JOBSIZE") or env.get("COBALT_PARTSIZE")
    size = None
    if size_text:
        if not size_text.isdigit() or int(size_text) < 1:
            raise WmlError(f"COBALT_JOBSIZE={size_text!r} is not a node count")
        size = int(size_text)
    path = env.get("COBALT_NODEFILE")
    if path and os.path.exists(path):
        hs = read_hostfile(path)
        hs = HostSet(hs.hosts, hs.slots, "COBALT_NODEFILE")
    elif env.get("COBALT_PARTNAME"):
        part = env["COBALT_PARTNAME"]
        try:
            ids = expand_hostlist(f"nid[{part}]")
        except WmlError:
            raise WmlError(f"COBALT_PARTNAME={part!r}: expected node ids like 3820-3823,3900") from None
        hosts = tuple(f"nid{int(i[3:]):05d}" for i in ids)
        hs = HostSet(hosts, (None,) * len(hosts), "COBALT_PARTNAME")
    else:
        raise WmlError("Cobalt job without COBALT_NODEFILE or COBALT_PARTNAME: cannot tell its nodes")
    if size is not None:
        if len(hs.hosts) < size:
            raise WmlError(f"{hs.source} names {len(hs.hosts)} nodes but COBALT_JOBSIZE is {size}")
        hs = hs.first(size)
    return hs


def pbs_hosts(env: Mapping[str, str]) -> HostSet:
    path = env.get("PBS_NODEFILE", "")
    if not os.path.exists(path):
        raise WmlError(f"PBS_NODEFILE={path!r}: no such file (is this shell inside the PBS job?)")
    hs = read_hostfile(path)
    return HostSet(hs.hosts, (None,) * len(hs.hosts), "PBS_NODEFILE")


def localhost(cores: Optional[int] = None) -> HostSet:
    return HostSet((LOCALHOST,), (cores,), "this machine")


def discover_hosts(env: Mapping[str, str] = os.environ) -> HostSet:
    """The allocation's hosts from the scheduler's variables, else this machine."""
    if env.get("LSB_DJOB_HOSTFILE") or env.get("LSB_MCPU_HOSTS"):
        return lsf_hosts(env)
    if env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST"):
        return slurm_hosts(env)
    if env.get("COBALT_NODEFILE") or env.get("COBALT_PARTNAME"):
        return cobalt_hosts(env)
    if env.get("PBS_NODEFILE"):
        return pbs_hosts(env)
    return localhost()
