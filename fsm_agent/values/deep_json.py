"""Deeply nested JSON values: how deep one nests, and its JSON text at any depth (the standard
encoder recurses, and fails past the interpreter's recursion limit)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from json.encoder import encode_basestring_ascii as _quote  # json.dumps' own
from typing import NamedTuple

from ..errors import InvalidInputError

__all__ = ["deep_json", "value_depth"]


def value_depth(value: object, limit: int) -> int:
    """How deeply ``value`` nests dicts and lists, counted until past ``limit`` (iteratively:
    it may be deeper than the interpreter's recursion limit)."""
    deepest = 0
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Sequence[object] = list(item.values())
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        deepest = max(deepest, depth)
        if deepest > limit:
            return deepest
        stack.extend((child, depth + 1) for child in children)
    return deepest


class _Value(NamedTuple):
    """A value still to write, on :func:`deep_json`'s stack."""

    value: object


class _Leave(NamedTuple):
    """The end of a container, on :func:`deep_json`'s stack: it leaves the current path."""

    container: int  # its id


_CONTAINERS = (dict, list, tuple)


def deep_json(value: object) -> str:
    """``value`` as compact JSON text, as ``json.dumps`` writes it, at any depth: iteratively,
    where the standard encoder recurses and fails past the interpreter's recursion limit.
    Raises :class:`InvalidInputError` for a value that contains itself."""
    out: list[str] = []
    path: set[int] = set()  # the containers being written, to catch a cycle
    stack: list[str | _Value | _Leave] = [_Value(value)]  # popped from the end; text as is
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            out.append(item)
            continue
        if isinstance(item, _Leave):
            path.discard(item.container)
            continue
        node = item.value
        if isinstance(node, str):
            out.append(_quote(node))
            continue
        if not isinstance(node, _CONTAINERS):
            out.append(json.dumps(node))
            continue
        if id(node) in path:
            raise InvalidInputError(
                "tool call arguments contain themselves (a cycle): give a tree of JSON values, "
                "such as json.loads returns"
            )
        path.add(id(node))
        if isinstance(node, dict):
            stack += [_Leave(id(node)), "}"]
            entries = list(node.items())
            for index in range(len(entries) - 1, -1, -1):
                key, child = entries[index]
                name = key if isinstance(key, str) else json.dumps(key)
                stack += [_Value(child), _quote(name) + ":"]
                if index:
                    stack.append(",")
            stack.append("{")
        else:
            stack += [_Leave(id(node)), "]"]
            for index in range(len(node) - 1, -1, -1):
                stack.append(_Value(node[index]))
                if index:
                    stack.append(",")
            stack.append("[")
    return "".join(out)
