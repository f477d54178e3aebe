"""The ``fabric:`` section of a site profile: the job's communication environment.

Each centre documents how its GPU collective library (NCCL, RCCL, oneCCL) must be set up on
its network (HPE Slingshot: a libfabric plugin and a set of variables; without them a
multi-node job falls back to TCP sockets or hangs).  The section holds those facts as data,
each with the centre's page and the date the value was checked there:

- ``settings``: modules and variables for a case, ``nodes`` (one node or several) and
  ``where`` (bare or inside a container, where the plugin's libraries must be bound in);
  every setting whose case matches applies, a later one's value replacing an earlier one's;
- ``plugin``: the network plugin library the library loads, and the module that provides it
  (``ddlrun --check`` looks for it on every node; a multi-node job without it is warned);
- ``node_dirs``: per-node cache directories the centre asks for (Frontier: MIOpen's), made on
  each node before the program starts.

Values may name other variables as ``$NAME`` or ``${NAME}`` (expanded where the job runs);
nothing else a shell would read is allowed in them.
"""
from __future__ import annotations

import re
from typing import Dict, List, Literal, Optional

import msgspec
from msgspec import Meta
from typing_extensions import Annotated

ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"
DATE = r"^\d{4}-\d{2}-\d{2}$"
# $NAME / ${NAME} may appear; quotes, backslashes, backquotes and $( ... ) may not
_VALUE_BAD = re.compile(r"[\"`\\\n]|\$(?![A-Za-z_{])|\$\{(?![A-Za-z_][A-Za-z0-9_]*\})")

Page = Annotated[str, Meta(pattern=r"^https?://", description="the centre's page the value comes from")]
Checked = Annotated[str, Meta(pattern=DATE, description="date (YYYY-MM-DD) the value was checked on that page")]


class _Strict(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    pass


def _check_values(values: Dict[str, str], what: str) -> None:
    for name, value in values.items():
        if not re.match(ENV_NAME, name):
            raise ValueError(f"{what}: {name!r} is not a variable name")
        if _VALUE_BAD.search(value):
            raise ValueError(f"{what}: {name}={value!r}: a value may name variables as $NAME or ${{NAME}}, "
                             "but holds no quotes, backslashes, backquotes or $(...)")


class FabricSetting(_Strict):
    """Modules and variables for one case, from one page."""

    page: Page
    checked: Checked
    nodes: Annotated[Literal["one", "several", "any"], Meta(description="one node, several nodes, or any job")] = "any"
    where: Annotated[Literal["bare", "container", "any"], Meta(description="bare (on the host), inside a container, or both")] = "any"
    modules: Annotated[List[str], Meta(description="modules loaded in the job script (after the site's)")] = []
    env: Annotated[Dict[str, str], Meta(description="variables every rank gets unless the user set them")] = {}
    prepend: Annotated[Dict[str, str], Meta(description="path lists (LD_LIBRARY_PATH) this text is put in front of")] = {}
    binds: Annotated[List[str], Meta(description="inside a container: host paths (SRC or SRC:DST) bound in")] = []
    container_env: Annotated[Dict[str, str], Meta(description="inside a container: variables set in it only, their values "
                                                   "naming host variables as $NAME (Apptainer's APPTAINERENV_LD_LIBRARY_PATH)")] = {}
    container_options: Annotated[Dict[str, str], Meta(description="inside a container: the runtime's own switches "
                                                       "(Shifter module: gpu,nccl-plugin; CE annotations com.hooks.aws_ofi_nccl.enabled: true)")] = {}
    note: str = ""

    def __post_init__(self) -> None:
        _check_values(self.env, "env")
        _check_values(self.prepend, "prepend")
        _check_values(self.container_env, "container_env")
        if self.where == "bare" and (self.binds or self.container_options or self.container_env):
            raise ValueError("binds, container_env and container_options are for settings with where: container (or any)")

    def applies(self, nodes: int, container: bool) -> bool:
        if self.nodes == "one" and nodes != 1 or self.nodes == "several" and nodes < 2:
            return False
        return self.where == "any" or self.where == ("container" if container else "bare")


class FabricPlugin(_Strict):
    """The network plugin the collective library loads (aws-ofi-nccl: libnccl-net.so;
    Frontier's RCCL build: librccl-net.so)."""

    library: Annotated[str, Meta(pattern=r"^[A-Za-z0-9_.+-]+\.so[0-9.]*$", description="its file name")]
    page: Page
    checked: Checked
    module: Annotated[Optional[str], Meta(description="the module that provides it (named in the warning when it is missing)")] = None
    paths: Annotated[List[str], Meta(description="directories it lives in besides LD_LIBRARY_PATH")] = []
    provider: Annotated[Optional[str], Meta(description="the libfabric provider it needs (Slingshot: cxi)")] = None
    where: Annotated[Literal["bare", "container", "any"], Meta(description="where the plugin is expected")] = "any"


class NodeDir(_Strict):
    """A directory each node needs before the program starts (named by variables of the
    settings; made with mkdir -p on every node)."""

    variables: Annotated[List[Annotated[str, Meta(pattern=ENV_NAME)]], Meta(min_length=1, description="variables whose value is the directory")]
    page: Page
    checked: Checked


class FabricSpec(_Strict):
    """The job's communication environment on this site."""

    library: Annotated[Literal["nccl", "rccl", "oneccl"], Meta(description="the GPU collective library the site's frameworks use")]
    network: Annotated[str, Meta(description="the interconnect (HPE Slingshot 11)")] = ""
    plugin: Optional[FabricPlugin] = None
    settings: List[FabricSetting] = []
    node_dirs: List[NodeDir] = []

    def __post_init__(self) -> None:
        named = {k for s in self.settings for k in s.env}
        for d in self.node_dirs:
            missing = [v for v in d.variables if v not in named]
            if missing:
                raise ValueError(f"node_dirs: {', '.join(missing)} not set by any setting's env")
