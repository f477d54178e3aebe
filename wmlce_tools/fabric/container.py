"""What a container job needs from the fabric: the host paths to bind in, the variables to
pass in, and the runtime's own switches (Shifter's ``--module=gpu,nccl-plugin``, the CSCS
Container Engine's ``com.hooks.aws_ofi_nccl.*`` annotations).  The container code (``--container``)
takes this as it is; values may name host variables as ``$NAME`` (expanded in the job script
or by ``expand`` where the job runs)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Tuple

from ..site.schema import SiteProfile
from .resolve import expand, fabric_for


@dataclass(frozen=True)
class ContainerFabric:
    binds: Tuple[str, ...] = ()                    # SRC or SRC:DST
    env: Tuple[Tuple[str, str], ...] = ()          # the ranks' variables in the container (a path list's value ends in :$NAME)
    options: Tuple[Tuple[str, str], ...] = ()      # runtime switches, by the runtime's own names
    modules: Tuple[str, ...] = ()                  # host modules loaded before the container starts
    pages: Tuple[str, ...] = ()

    def expanded_env(self, host_env: Mapping[str, str]) -> Tuple[Tuple[str, str], ...]:
        return tuple((k, expand(v, host_env)) for k, v in self.env)


def container_fabric(site: SiteProfile, nodes: int) -> ContainerFabric:
    """The fabric of a container job of ``nodes`` nodes on ``site`` (empty: the site says nothing)."""
    fab = fabric_for(site, nodes, container=True)
    if fab is None:
        return ContainerFabric()
    env = dict((v.name, v.value if v.kind == "set" else f"{v.value}:${v.name}") for v in fab.values)
    env.update((v.name, v.value) for v in fab.container_env)     # set inside the container only: replaces the host's
    env = tuple(env.items())
    return ContainerFabric(binds=fab.binds, env=env, options=fab.container_options,
                           modules=tuple(m for m, _ in fab.modules), pages=tuple(p for p, _ in fab.pages))

