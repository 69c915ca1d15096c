"""A layered drawing of a DAG, computed here so the page needs no JavaScript or drawing library.

Pure geometry: nodes (in definition order, each naming the nodes it depends on)
in, boxes and edge paths out. A node's layer is the longest path to it from a
root, so every edge points to a later layer (left to right); within a layer the
nodes keep definition order, so the same workflow is drawn the same way on every
reload. Layers with fewer nodes are centred against the tallest one, which keeps
a diamond looking like one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

NODE_WIDTH = 204  # room for "children · 10/10 done · 3 at once"
NODE_HEIGHT = 58
LAYER_GAP = 72  # horizontal room between layers, where edges run
ROW_GAP = 22
MARGIN = 12


@dataclass(frozen=True, slots=True)
class Box:
    key: str
    layer: int
    row: int  # position within its layer, in definition order
    x: float
    y: float
    width: float = NODE_WIDTH
    height: float = NODE_HEIGHT


@dataclass(frozen=True, slots=True)
class Edge:
    source: str
    target: str
    path: str  # an SVG path from the right edge of `source` to the left edge of `target`


@dataclass(frozen=True, slots=True)
class Layout:
    boxes: dict[str, Box]
    edges: list[Edge]
    width: float
    height: float


def layers(nodes: Sequence[tuple[str, Sequence[str]]]) -> dict[str, int]:
    """Each node's layer: 0 for a root, else one more than its deepest dependency.

    Dependencies on keys not among `nodes` are ignored. Nodes must come in an order where
    dependencies precede their dependants (a workflow's build order guarantees it); one
    that does not is treated as a root rather than looping.
    """
    found: dict[str, int] = {}
    for key, deps in nodes:
        found[key] = 1 + max((found[dep] for dep in deps if dep in found), default=-1)
    return found


def layout(nodes: Sequence[tuple[str, Sequence[str]]]) -> Layout:
    """Boxes on a grid (layer → column, order within the layer → row) and one edge per dependency."""
    layer_of = layers(nodes)
    columns: dict[int, list[str]] = {}
    for key, _ in nodes:
        columns.setdefault(layer_of[key], []).append(key)
    tallest = max((len(keys) for keys in columns.values()), default=0)
    pitch = NODE_HEIGHT + ROW_GAP
    row_of = {key: row for keys in columns.values() for row, key in enumerate(keys)}
    boxes: dict[str, Box] = {}
    for key, _ in nodes:  # in definition order: the page draws (and a reader tabs through) them so
        layer, row = layer_of[key], row_of[key]
        offset = (tallest - len(columns[layer])) * pitch / 2
        x = MARGIN + layer * (NODE_WIDTH + LAYER_GAP)
        boxes[key] = Box(key, layer, row, x, MARGIN + offset + row * pitch)
    edges = [
        Edge(dep, key, _curve(boxes[dep], boxes[key]))
        for key, deps in nodes
        for dep in dict.fromkeys(deps)
        if dep in boxes and boxes[dep].layer < boxes[key].layer
    ]
    width = 2 * MARGIN + len(columns) * NODE_WIDTH + max(0, len(columns) - 1) * LAYER_GAP
    height = 2 * MARGIN + tallest * NODE_HEIGHT + max(0, tallest - 1) * ROW_GAP
    return Layout(boxes, edges, width, height)


def _curve(source: Box, target: Box) -> str:
    """A horizontal S-curve between the boxes' facing sides (ends short of the box for the arrowhead)."""
    x1, y1 = source.x + source.width, source.y + source.height / 2
    x2, y2 = target.x - 2, target.y + target.height / 2
    bend = (x2 - x1) / 2
    return f"M{x1:g},{y1:g} C{x1 + bend:g},{y1:g} {x2 - bend:g},{y2:g} {x2:g},{y2:g}"
