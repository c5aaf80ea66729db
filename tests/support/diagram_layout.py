"""Legibility measured on the layout Graphviz computes (its ``json`` output): label sizes at a
page's width, label boxes that overlap, edges that run through a label.

Coordinates are Graphviz points (y up); a picture is shown at its natural size (1 pt = 4/3 px)
or shrunk to fit ``width_px``, never enlarged.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from fsm_agent.diagrams import render

PX_PER_PT = 4 / 3


@dataclass(frozen=True)
class Box:
    """A rectangle in points, named for the messages."""

    name: str
    x0: float
    y0: float
    x1: float
    y1: float

    def overlaps(self, other: Box, slack: float = 0.5) -> bool:
        """Whether the two boxes share more than ``slack`` points each way."""
        return (
            self.x0 + slack < other.x1
            and other.x0 + slack < self.x1
            and self.y0 + slack < other.y1
            and other.y0 + slack < self.y1
        )

    def holds(self, x: float, y: float, inset: float = 1.0) -> bool:
        """Whether ``(x, y)`` lies inside, ``inset`` points from the border."""
        return self.x0 + inset < x < self.x1 - inset and self.y0 + inset < y < self.y1 - inset


@dataclass(frozen=True)
class Layout:
    """What the test measures: the picture's size, each text line's size, the label boxes of
    nodes and edges, and each edge's spline and arrowheads as sampled points."""

    width: float
    height: float
    texts: list[tuple[str, float]]  # (text, font size in points)
    node_boxes: list[Box]  # a node's outline
    node_texts: list[Box]  # the text of a node, per node
    edge_labels: dict[int, Box]  # by edge index
    splines: dict[int, list[tuple[float, float]]]  # by edge index, arrowheads included
    edge_names: dict[int, str]


def _text_boxes(ops: list[dict[str, Any]]) -> list[tuple[Box, str, float]]:
    """The box of each text line an xdot operation list draws."""
    size = 14.0
    boxes = []
    for op in ops:
        if op["op"] == "F":
            size = float(op["size"])
        elif op["op"] == "T":
            x, y = op["pt"]
            width = float(op["width"])
            left = {"l": x, "c": x - width / 2, "r": x - width}[op["align"]]
            box = Box(op["text"], left, y - 0.25 * size, left + width, y + 0.8 * size)
            boxes.append((box, op["text"], size))
    return boxes


def _union(name: str, boxes: list[Box]) -> Box:
    return Box(
        name,
        min(b.x0 for b in boxes),
        min(b.y0 for b in boxes),
        max(b.x1 for b in boxes),
        max(b.y1 for b in boxes),
    )


def _bezier(points: list[list[float]], steps: int = 12) -> list[tuple[float, float]]:
    """Points along a piecewise cubic Bézier (xdot's ``b``/``B`` operation)."""
    sampled = []
    for i in range(0, len(points) - 3, 3):
        (ax, ay), (bx, by), (cx, cy), (dx, dy) = points[i : i + 4]
        for k in range(steps + 1):
            t = k / steps
            u = 1 - t
            sampled.append(
                (
                    u**3 * ax + 3 * u * u * t * bx + 3 * u * t * t * cx + t**3 * dx,
                    u**3 * ay + 3 * u * u * t * by + 3 * u * t * t * cy + t**3 * dy,
                )
            )
    return sampled


def layout(dot: str) -> Layout:
    """The layout of ``dot`` as Graphviz's ``dot`` computes it."""
    data = json.loads(render(dot, "json"))
    x0, y0, x1, y1 = (float(v) for v in data["bb"].split(","))
    texts: list[tuple[str, float]] = []
    node_boxes, node_texts = [], []
    graph_label = _text_boxes(data.get("_ldraw_", []))
    texts.extend((text, size) for _, text, size in graph_label)
    names = {}
    for obj in data.get("objects", []):
        if "nodes" in obj or "pos" not in obj:  # a cluster or subgraph
            texts.extend((t, s) for _, t, s in _text_boxes(obj.get("_ldraw_", [])))
            continue
        names[obj["_gvid"]] = obj["name"]
        x, y = (float(v) for v in obj["pos"].split(","))
        w, h = float(obj["width"]) * 72, float(obj["height"]) * 72
        node_boxes.append(Box(obj["name"], x - w / 2, y - h / 2, x + w / 2, y + h / 2))
        lines = _text_boxes(obj.get("_ldraw_", []))
        texts.extend((t, s) for _, t, s in lines)
        if lines:
            node_texts.append(_union(obj["name"], [b for b, _, _ in lines]))
    edge_labels, splines, edge_names = {}, {}, {}
    for edge in data.get("edges", []):
        index = edge["_gvid"]
        name = f"{names.get(edge['tail'], edge['tail'])} -> {names.get(edge['head'], edge['head'])}"
        edge_names[index] = name
        lines = _text_boxes(edge.get("_ldraw_", []))
        texts.extend((t, s) for _, t, s in lines)
        if lines:
            edge_labels[index] = _union(name, [b for b, _, _ in lines])
        points: list[tuple[float, float]] = []
        for op in edge.get("_draw_", []):
            if op["op"] in ("b", "B"):
                points.extend(_bezier(op["points"]))
        for op in [*edge.get("_hdraw_", []), *edge.get("_tdraw_", [])]:
            if op["op"] in ("p", "P"):  # an arrowhead: its corners and centre
                corners = [(float(x), float(y)) for x, y in op["points"]]
                centre = (
                    sum(x for x, _ in corners) / len(corners),
                    sum(y for _, y in corners) / len(corners),
                )
                points.extend([*corners, centre])
        splines[index] = points
    return Layout(x1 - x0, y1 - y0, texts, node_boxes, node_texts, edge_labels, splines, edge_names)


def problems(dot: str, width_px: float = 900, min_px: float = 9) -> list[str]:
    """Everything that makes the picture of ``dot`` hard to read at ``width_px``: a text line
    under ``min_px``, two labels (or a label and a node) that overlap, an edge through a label."""
    drawn = layout(dot)
    scale = PX_PER_PT * min(1.0, width_px / (drawn.width * PX_PER_PT))
    found = [
        f"{text!r} is {size * scale:.1f} px at {width_px:.0f} px wide"
        for text, size in drawn.texts
        if size * scale < min_px
    ]
    labels = list(drawn.edge_labels.values())
    boxes = labels + drawn.node_boxes
    for i, a in enumerate(labels):
        for b in boxes[i + 1 :]:
            if a.overlaps(b):
                found.append(f"label {a.name!r} overlaps {b.name!r}")
    for index, points in drawn.splines.items():
        own = drawn.edge_labels.get(index)
        for box in [*drawn.edge_labels.values(), *drawn.node_texts]:
            if box is own:
                continue
            if any(box.holds(x, y) for x, y in points):
                found.append(f"edge {drawn.edge_names[index]!r} runs through {box.name!r}")
    return found
