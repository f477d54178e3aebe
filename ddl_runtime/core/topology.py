"""The DDL mode string and the rank hierarchy it describes (pure Python, no MPI).

A mode `p:GxNxRxA` means G ranks per node, N nodes per rack, R racks per aisle and A aisles,
with ranks numbered contiguously: rank r sits at local rank r % G of node r // G, and so on
up the levels.  `Hierarchy` turns level sizes into each rank's coordinates; a level's
communicator holds the ranks that share every coordinate except that level's.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Optional, Tuple

from ..errors import DDLInputError

LEVEL_NAMES = ("node", "rack", "aisle", "top")
_MODE = re.compile(r"^p:(\d+(?:x\d+){0,3})$")


@dataclass(frozen=True)
class Mode:
    """A parsed `p:GxNxRxA` mode: ranks per node, nodes per rack, racks per aisle, aisles."""

    ranks_per_node: int
    nodes_per_rack: int = 1
    racks_per_aisle: int = 1
    aisles: int = 1

    @property
    def levels(self) -> Tuple[int, int, int, int]:
        return (self.ranks_per_node, self.nodes_per_rack, self.racks_per_aisle, self.aisles)

    @property
    def world_size(self) -> int:
        return math.prod(self.levels)

    def __str__(self) -> str:
        return "p:" + "x".join(str(n) for n in self.levels)


def parse_mode(text: str, source: str = "mode") -> Mode:
    """Parse `p:6x2x1x1` (1 to 4 factors; missing trailing factors are 1)."""
    match = _MODE.match(text.strip())
    if not match:
        raise DDLInputError(
            f"{source} {text!r} is malformed: expected p:<ranks per node>x<nodes per rack>"
            f"x<racks per aisle>x<aisles>, e.g. p:6x2x1x1"
        )
    factors = [int(n) for n in match.group(1).split("x")]
    if any(n < 1 for n in factors):
        raise DDLInputError(f"{source} {text!r} has a factor below 1")
    return Mode(*factors)


@dataclass(frozen=True)
class Hierarchy:
    """Level sizes, innermost (node) first, for contiguously numbered ranks."""

    sizes: Tuple[int, ...]
    source: str  # "mode", "emulate", "launcher", "shared-memory", "flat"

    @property
    def world_size(self) -> int:
        return math.prod(self.sizes)

    @property
    def active_levels(self) -> Tuple[int, ...]:
        """Indices of the levels with more than one member (the ones the algorithm visits)."""
        return tuple(i for i, n in enumerate(self.sizes) if n > 1)

    def coordinates(self, rank: int) -> Tuple[int, ...]:
        coords = []
        for n in self.sizes:
            coords.append(rank % n)
            rank //= n
        return tuple(coords)

    def level_color(self, rank: int, level: int) -> int:
        """A colour shared by exactly the ranks that differ from `rank` only at `level`."""
        coords = list(self.coordinates(rank))
        coords[level] = 0
        color, scale = 0, 1
        for c, n in zip(coords, self.sizes):
            color += c * scale
            scale *= n
        return color

    @property
    def local_size(self) -> int:
        return self.sizes[0]

    def local_rank(self, rank: int) -> int:
        return rank % self.sizes[0]

    def cross_rank(self, rank: int) -> int:
        return rank // self.sizes[0]


def hierarchy_for(world_size: int, mode: Optional[Mode], emulate_nodes: Optional[int]) -> Optional[Hierarchy]:
    """The hierarchy the job's settings ask for: mode string first, then DDL_EMULATE_NODES.

    None means "no setting: ask MPI (launcher node ids or shared-memory split)".
    """
    if mode is not None:
        if mode.world_size != world_size:
            raise DDLInputError(
                f"mode {mode} describes {mode.world_size} ranks but the job has {world_size}"
            )
        return Hierarchy(mode.levels, "mode")
    if emulate_nodes is not None:
        if emulate_nodes > world_size or world_size % emulate_nodes:
            raise DDLInputError(
                f"DDL_EMULATE_NODES={emulate_nodes} must divide the world size {world_size} "
                "into equal node blocks"
            )
        return Hierarchy((world_size // emulate_nodes, emulate_nodes), "emulate")
    return None
