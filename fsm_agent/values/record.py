"""Cheap value types, validated where data crosses a boundary.

The public values a run builds at every step (messages and their parts, responses, usage,
events, the run state) are slotted dataclasses: building one costs what a plain object costs,
and it holds no per-instance dictionary. pydantic validates and serialises them at the edges (a
provider's reader, a checkpoint, a recording, a user's input) through one ``TypeAdapter`` per
type, built on first use.

:class:`Record` gives these types the methods a pydantic model user reaches for
(``model_validate``, ``model_validate_json``, ``model_dump``, ``model_dump_json``,
``model_copy``), each a call on that adapter, so code written against the pydantic models they
replace keeps working. Building one with its constructor validates nothing: the constructor is
the kernel's fast path, and the adapter is the edge.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Callable, Collection, Mapping
from typing import (
    TYPE_CHECKING,
    Annotated,
    Any,
    ClassVar,
    Literal,
    NamedTuple,
    TypeAlias,
    TypeVar,
    Union,
)

if TYPE_CHECKING:
    from typing import Self

    from pydantic import TypeAdapter

__all__ = ["Record", "adapter", "field_problem"]

_T = TypeVar("_T")
_ADAPTERS: dict[type[Any], TypeAdapter[Any]] = {}


def adapter(cls: type[_T]) -> TypeAdapter[_T]:
    """The one ``TypeAdapter`` of ``cls``, built on first use (pydantic is imported then, not
    when the type is defined)."""
    found = _ADAPTERS.get(cls)
    if found is None:
        from pydantic import TypeAdapter

        found = _ADAPTERS[cls] = TypeAdapter(cls)
    return found


class Record:
    """The base of fsm_agent's value types (declared ``@dataclass(slots=True)``, most of them
    frozen): validation and JSON through the type's ``TypeAdapter``, which refuses a field the
    type does not have (data written by a newer version, a misspelt name)."""

    __slots__ = ()
    # pydantic's configuration of a dataclass, inherited by every value type.
    __pydantic_config__: ClassVar[dict[str, Any]] = {"extra": "forbid"}

    @classmethod
    def model_validate(cls, obj: object) -> Self:
        """``obj`` (a mapping of field values, or an instance) validated as this type; raises
        ``pydantic.ValidationError``."""
        return adapter(cls).validate_python(obj)

    @classmethod
    def model_validate_json(cls, data: str | bytes) -> Self:
        """The JSON text ``data`` validated as this type; raises ``pydantic.ValidationError``."""
        return adapter(cls).validate_json(data)

    def model_dump(
        self,
        *,
        mode: Literal["python", "json"] = "python",
        include: set[str] | None = None,
        exclude: set[str] | None = None,
        exclude_none: bool = False,
        exclude_defaults: bool = False,
    ) -> dict[str, Any]:
        """The fields as a dict, nested values dumped too (``mode="json"``: JSON-ready)."""
        dumped: dict[str, Any] = adapter(type(self)).dump_python(
            self,
            mode=mode,
            include=include,
            exclude=exclude,
            exclude_none=exclude_none,
            exclude_defaults=exclude_defaults,
        )
        return dumped

    def model_dump_json(self, *, indent: int | None = None, exclude_none: bool = False) -> str:
        """The value as JSON text."""
        return (
            adapter(type(self)).dump_json(self, indent=indent, exclude_none=exclude_none).decode()
        )

    def model_copy(self, *, update: Mapping[str, Any] | None = None) -> Self:
        """A copy with the fields in ``update`` replaced (not validated, as with pydantic)."""
        return dataclasses.replace(self, **(update or {}))  # type: ignore[type-var]


# -- the fields of a value built by user code --------------------------------------------------
_Check: TypeAlias = Callable[[object], "str | None"]
"""What is wrong with a value of one declared type, or ``None``. A problem reads from the value
on (``" is an int, not a str"``, ``"[0].text is ..."``): a container puts its part of the path
in front only when something is wrong, so a good value costs no text."""

_FIELDS: dict[type[Any], tuple[tuple[str, _Check], ...]] = {}


def field_problem(value: object, *, skip: Collection[str] = ()) -> str | None:
    """The first field of the dataclass ``value`` (nested values included) that does not hold
    its declared type, as ``"parts[0].text is an int, not a str"``; ``None`` when every field
    does.

    For a value user code built with a constructor (which converts and checks nothing): a
    history given to a run, a hook's answer. Exact, where pydantic's lax mode would convert: a
    dict is not a record, nor a list a tuple, nor a ``str`` a :class:`~enum.Enum` member. A
    JSON value must be one JSON can hold: finite numbers, string keys, no cycle. The fields
    named in ``skip`` are not checked (they are known to be good)."""
    problem = _fields_problem(value, skip)
    return None if problem is None else problem[1:]  # without the first field's "."


def _fields_problem(value: object, skip: Collection[str] = ()) -> str | None:
    cls = type(value)
    checks = _FIELDS.get(cls)
    if checks is None:  # the declared types, compiled once per class
        hints = typing.get_type_hints(cls, include_extras=True)
        checks = _FIELDS[cls] = tuple(
            (f.name, _compile(hints[f.name]))
            for f in dataclasses.fields(cls)  # type: ignore[arg-type]
        )
    for name, check in checks:
        if skip and name in skip:
            continue
        problem = check(getattr(value, name))
        if problem is not None:
            return f".{name}{problem}"
    return None


def _compile(hint: Any) -> _Check:
    """The check of a value declared as ``hint``."""
    origin = typing.get_origin(hint)
    if origin is Annotated:
        return _compile(typing.get_args(hint)[0])
    if getattr(hint, "__name__", None) == "JsonValue":  # pydantic's
        return _json_problem
    if origin is Union or origin is types.UnionType:
        return _union(typing.get_args(hint))
    if origin is Literal:
        return _literal(typing.get_args(hint))
    if origin is tuple:
        return _items(_compile(typing.get_args(hint)[0]))
    if origin is dict or origin is Mapping:
        return _mapping(_compile(typing.get_args(hint)[1]))
    if hint is None or hint is type(None):
        return _none
    if not isinstance(hint, type):
        return _anything  # a form no field here declares
    if dataclasses.is_dataclass(hint):
        return _record(hint)
    return _instance(hint)


def _anything(value: object) -> None:
    return None


def _none(value: object) -> str | None:
    return None if value is None else _wrong(value, "None")


def _instance(cls: type[Any]) -> _Check:
    """An instance of ``cls`` (an ``int`` for a ``float``; never a ``bool`` for an ``int``)."""
    if cls is int or cls is float:
        exact = (int,) if cls is int else (int, float)

        def number(value: object) -> str | None:
            return None if type(value) in exact else _wrong(value, cls.__name__)

        return number

    def instance(value: object) -> str | None:
        return None if isinstance(value, cls) else _wrong(value, cls.__name__)

    return instance


def _record(cls: type[Any]) -> _Check:
    def record(value: object) -> str | None:
        if type(value) is not cls:
            return _wrong(value, cls.__name__)
        return _fields_problem(value)

    return record


def _literal(choices: tuple[object, ...]) -> _Check:
    def literal(value: object) -> str | None:
        if any(type(value) is type(c) and value == c for c in choices):
            return None
        return f" is {value!r}, not one of {', '.join(map(repr, choices))}"

    return literal


_EXACT: dict[Any, tuple[type[Any], ...]] = {
    None: (type(None),),
    type(None): (type(None),),
    str: (str,),
    bool: (bool,),
    int: (int,),
    float: (int, float),
}
"""For a declared type, the types whose every instance is a value of it."""


def _union(choices: tuple[Any, ...]) -> _Check:
    """One of ``choices``; a record of one of them is checked field by field, and a value of
    the right kind with a wrong item is told what is wrong with the item."""
    records = {c for c in choices if isinstance(c, type) and dataclasses.is_dataclass(c)}
    others = [_compile(c) for c in choices if c not in records]
    simple = frozenset(kind for c in choices for kind in _EXACT.get(c, ()))
    names = " or ".join(_name(c) for c in choices)
    literal = any(typing.get_origin(c) is Literal for c in choices)

    def union(value: object) -> str | None:
        kind = type(value)
        if kind in simple:
            return None
        if kind in records:
            return _fields_problem(value)
        problems = []
        for check in others:
            problem = check(value)
            if problem is None:
                return None
            problems.append(problem)
        deeper = [p for p in problems if not p.startswith(" is ")]
        if deeper:
            return deeper[0]
        if literal and isinstance(value, str | int):  # a value, where others are named
            return f" is {value!r}, not {names}"
        return _wrong(value, names)

    return union


def _items(check: _Check) -> _Check:
    def items(value: object) -> str | None:
        if type(value) is not tuple:
            return _wrong(value, "tuple")
        for index, item in enumerate(value):
            problem = check(item)
            if problem is not None:
                return f"[{index}]{problem}"
        return None

    return items


def _mapping(check: _Check) -> _Check:
    def mapping(value: object) -> str | None:
        if not isinstance(value, Mapping):
            return _wrong(value, "dict")
        for key, item in value.items():
            if type(key) is not str:
                return f" has the key {key!r}, not a str"
            problem = check(item)
            if problem is not None:
                return f"[{key!r}]{problem}"
        return None

    return mapping


def _json_problem(value: object) -> str | None:
    """What keeps ``value`` from being a JSON value (a number that is not finite, a key that is
    not a string, an object of another type, a container that contains itself), or ``None``.
    Iterative, so any depth is checked; the path to a problem is rebuilt only once found."""
    walking: set[int] = set()  # the containers on the current path, to catch a cycle
    # An entry to check, or the id of a container whose items are all checked (it is left).
    stack: list[_Entry | int] = [_Entry(value, None, None)]
    while stack:
        entry = stack.pop()
        if isinstance(entry, int):
            walking.discard(entry)
            continue
        item = entry.value
        if item is None or isinstance(item, str | int):  # bool is an int
            continue
        if isinstance(item, float):
            if math.isfinite(item):
                continue
            return f"{_path(entry)} is {item!r}, a number JSON cannot hold"
        if not isinstance(item, dict | list | tuple):
            return _path(entry) + _wrong(
                item, "JSON value (str, int, float, bool, None, list or dict)"
            )
        if id(item) in walking:
            return f"{_path(entry)} contains itself"
        walking.add(id(item))
        stack.append(id(item))
        if isinstance(item, dict):
            for key, child in item.items():
                if type(key) is not str:
                    return f"{_path(entry)} has the key {key!r}, not a str"
                if type(child) not in _PLAIN:
                    stack.append(_Entry(child, entry, key))
        else:
            stack.extend(
                _Entry(child, entry, i) for i, child in enumerate(item) if type(child) not in _PLAIN
            )
    return None


_PLAIN = frozenset({str, int, bool, type(None)})
"""The types whose every value is a JSON value (checked without an entry of their own)."""


class _Entry(NamedTuple):
    """A value still to check in :func:`_json_problem`, and where it sits."""

    value: object
    parent: _Entry | None
    key: str | int | None


def _path(entry: _Entry) -> str:
    keys: list[str] = []
    step: _Entry | None = entry
    while step is not None and step.parent is not None:
        keys.append(f"[{step.key!r}]")
        step = step.parent
    return "".join(reversed(keys))


def _name(hint: Any) -> str:
    if hint is None or hint is type(None):
        return "None"
    if typing.get_origin(hint) is Literal:
        return " or ".join(map(repr, typing.get_args(hint)))
    return getattr(hint, "__name__", None) or repr(hint)


def _wrong(value: object, expected: str) -> str:
    return f" is {_a(type(value).__name__)}, not {_a(expected)}"


def _a(name: str) -> str:
    if name in ("None", "NoneType") or not name[0].isalpha():
        return name
    return f"an {name}" if name[0].lower() in "aeiou" else f"a {name}"
