"""The node-local place an environment is staged to, and the name of this node.

Only the standard library: the per-rank shim (``ddlrun.rankexec``) imports this.

A place is a path with ``$VARIABLES`` (``/mnt/bb/$USER``) expanded on each node, and an
optional ``{node}`` replaced by the node's name: on a real machine the place is the same path
on every node; on emulated nodes that share one host (the local site, ``scripts/local-slurm``)
``{node}`` gives each its own directory.
"""
from __future__ import annotations

import os
import re
import socket

NODE_TOKEN = "{node}"
#: set by the job script after staging, when the staged prefix differs from node to node
NODE_PREFIX_VAR = "WML_STAGE_NODE_PREFIX"
#: set by the job script after staging: the shared env's prefix the copy was made from
FROM_VAR = "WML_STAGED_FROM"
_VAR = re.compile(r"\$(\w+|\{\w+\})")
#: directories ddlrun hands every rank that may name ``{node}`` (CUDA MPS's, ddlrun/mps.py)
NODE_PATH_VARS = ("CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_LOG_DIRECTORY")


def node_name(node_index: int | None = None, environ: dict | None = None) -> str:
    """What ``{node}`` stands for: Slurm's name for this node, else ``node<i>`` with i the
    node's index in the job (ddlrun's ``GROUP_RANK``; 0 in the job script, which runs on the
    job's first node)."""
    env = os.environ if environ is None else environ
    if env.get("SLURMD_NODENAME"):
        return env["SLURMD_NODENAME"]
    index = node_index if node_index is not None else env.get("GROUP_RANK", "0")
    return f"node{index}"


def node_label(environ: dict | None = None) -> str:
    """This node in a message: Slurm's name, ddlrun's emulated ``node<i>``, else the host name."""
    env = os.environ if environ is None else environ
    if env.get("SLURMD_NODENAME"):
        return env["SLURMD_NODENAME"]
    if env.get("DDL_EMULATE_NODES"):
        return node_name(environ=env)
    return socket.gethostname().split(".")[0]


def expand(template: str, node: str, environ: dict | None = None) -> str:
    """The place (or a path under it) on the node called ``node``: ``{node}`` and the
    ``$VARIABLES`` of that node's environment (one left unset stays as written)."""
    env = os.environ if environ is None else environ

    def var(m: re.Match) -> str:
        return env.get(m.group(1).strip("{}"), m.group(0))

    return _VAR.sub(var, template.replace(NODE_TOKEN, node))


def unset(template: str, environ: dict | None = None) -> list:
    """The ``$VARIABLES`` of ``template`` this node's environment lacks (the place would be wrong)."""
    env = os.environ if environ is None else environ
    return [m.group(1).strip("{}") for m in _VAR.finditer(template) if m.group(1).strip("{}") not in env]


def node_paths(env: dict, node_index: int) -> None:
    """The ``NODE_PATH_VARS`` whose value holds ``{node}`` (emulated nodes sharing one host, each
    with its own directory): as this rank's node is called."""
    for var in NODE_PATH_VARS:
        if NODE_TOKEN in env.get(var, ""):
            env[var] = env[var].replace(NODE_TOKEN, node_name(node_index, env))


def rank_environment(env: dict, node_index: int) -> None:
    """A rank of a staged job runs from its node's copy: on emulated nodes (``{node}`` in the
    place) CONDA_PREFIX (a virtualenv's VIRTUAL_ENV) becomes this node's copy, and every PATH and LD_LIBRARY_PATH entry under
    the shared env (``WML_STAGED_FROM``: a module or the user put it there) or under the job
    script's copy points into this rank's copy instead."""
    key = next((k for k in ("CONDA_PREFIX", "VIRTUAL_ENV") if env.get(k)), None)   # a conda env or a virtualenv
    if key is None:
        return
    current = env[key]
    template = env.get(NODE_PREFIX_VAR)
    mine = expand(template, node_name(node_index, env), env) if template else current
    env[key] = mine
    olds = [p for p in (current, env.get(FROM_VAR)) if p and p != mine]
    for var in ("PATH", "LD_LIBRARY_PATH"):
        if env.get(var) and olds:
            env[var] = os.pathsep.join(_moved(p, olds, mine) for p in env[var].split(os.pathsep))


def _moved(path: str, olds: list, new: str) -> str:
    for old in olds:
        if path == old or path.startswith(old + "/"):
            return new + path[len(old):]
    return path
