"""How the value types are defined: :func:`record`, a dataclass built with less work at import.

``@dataclass(frozen=True, slots=True, kw_only=True)`` compiles six methods from source text for
every class (``__init__``, ``__repr__``, ``__eq__``, ``__hash__``, ``__setattr__``,
``__delattr__``), one ``exec`` each, when its module is imported. The messages, events, run
state, table rows and the kernel's values are some eighty such classes, and compiling their
methods was a third of what ``from fsm_agent import Agent`` cost. :func:`record` compiles only
the ``__init__`` (the body a dataclass's has, except that a frozen value's fields are set
through their slots' own setters, which costs a third of the dataclass's ``object.__setattr__``
per field: a kernel step builds about ten values) and gives the class the others as functions
shared by every record, which read the fields from the class.
What it returns is a standard dataclass (``dataclasses.fields`` and ``replace``, pydantic,
pickling work as before) that behaves as the decorator's would: ``tests/values/test_define.py``
checks each value type against it.

:func:`builder` gives a record type a function that builds its values for less than a class
call costs; the kernel builds the values of every step with one.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from dataclasses import MISSING, FrozenInstanceError, dataclass, field
from functools import partial
from operator import attrgetter
from reprlib import recursive_repr
from types import MemberDescriptorType
from typing import Any, ParamSpec, TypeVar, cast, overload

from typing_extensions import dataclass_transform

__all__ = ["builder", "record"]

_C = TypeVar("_C", bound=type[Any])
_P = ParamSpec("_P")
_V = TypeVar("_V")


class _Factory:
    """The default of a field whose default is made by a factory (shown as ``<factory>`` in
    the ``__init__``'s signature, as a dataclass shows it)."""

    def __repr__(self) -> str:
        return "<factory>"


_FACTORY = _Factory()
_PARAMS = "__dataclass_params__"


@overload
def record(cls: _C, /) -> _C: ...
@overload
def record(*, frozen: bool = True, kw_only: bool = True) -> Callable[[_C], _C]: ...


@dataclass_transform(kw_only_default=True, frozen_default=True, field_specifiers=(field,))
def record(
    cls: _C | None = None, /, *, frozen: bool = True, kw_only: bool = True
) -> _C | Callable[[_C], _C]:
    """``cls`` as ``@dataclass(frozen=frozen, slots=True, kw_only=kw_only)`` makes it,
    defined with one method compiled instead of six."""

    def define(cls: _C) -> _C:
        made = _dataclass(cls, frozen=frozen, kw_only=kw_only)
        _add(made, "__init__", _init(made, frozen=frozen))
        if made.__doc__ is None:
            signature = str(inspect.signature(made)).replace(" -> None", "")
            made.__doc__ = f"{made.__name__}{signature}"
        _add(made, "__repr__", _repr)
        _add(made, "__eq__", _eq)
        hash_kept = "__hash__" in cls.__dict__ and not (
            cls.__dict__["__hash__"] is None and "__eq__" in cls.__dict__
        )
        if not hash_kept:  # a dataclass's rule: frozen values hash by their fields
            made.__hash__ = _hash if frozen else None  # type: ignore[assignment]
        if frozen:
            for name, function in _FROZEN.items():
                _add(made, name, function)
        params = vars(made)[_PARAMS]  # what a subclass's @dataclass reads
        params.init = params.repr = params.eq = True
        params.frozen = frozen
        return made

    return define if cls is None else define(cls)


def _dataclass(cls: _C, *, frozen: bool, kw_only: bool) -> _C:
    """``cls`` made a slotted dataclass with no method compiled, refused as a dataclass would
    refuse it when it mixes frozen and not frozen with its bases."""
    bases = [vars(b)[_PARAMS] for b in cls.__mro__[1:] if _PARAMS in vars(b)]
    if bases and any(p.frozen for p in bases) != frozen:
        raise TypeError(
            f"cannot inherit {'' if frozen else 'non-'}frozen dataclass from a "
            f"{'non-' if frozen else ''}frozen one"
        )
    were = [p.frozen for p in bases]
    for p in bases:  # made as if not frozen (frozen methods are added after): bases agree
        p.frozen = False
    undocumented = not cls.__doc__
    if undocumented:  # or dataclass() would read the signature of object.__init__, slowly
        cls.__doc__ = cls.__name__
    try:
        made = dataclass(cls, init=False, repr=False, eq=False, slots=True, kw_only=kw_only)
    finally:
        for p, frozen_before in zip(bases, were, strict=True):
            p.frozen = frozen_before
    if undocumented:  # the docstring a dataclass gives, once the __init__ is added
        made.__doc__ = None
    return cast(_C, made)


def _add(cls: type[Any], name: str, function: Callable[..., Any]) -> None:
    """Set a method the class does not define itself (as a dataclass does)."""
    if name not in cls.__dict__:
        setattr(cls, name, function)


def builder(cls: Callable[_P, _V]) -> Callable[_P, _V]:
    """A function that builds a value of the record type ``cls`` from the arguments its
    constructor takes (the same parameters, defaults and checks) for a fifth to a third of
    what calling the class costs: on Python 3.11 a class call packs its keywords into a dict
    and its ``__init__`` unpacks them again, a function call does neither, and a frozen value
    is built as its unfrozen twin (:func:`_unfrozen_twin`), whose fields are set as plain
    attributes. For the values the kernel builds on every step; ``cls(...)`` stays the way
    to build one everywhere else."""
    made: Callable[_P, _V] | None = _BUILDERS.get(cls)
    if made is None:
        if not isinstance(cls, type) or vars(cls).get("__init__") is not _INITS.get(cls, 0):
            raise TypeError(f"{cls!r} is not a type defined by @record")  # or has its own init
        made = _BUILDERS[cls] = _compile(cls, frozen=vars(cls)[_PARAMS].frozen, build=True)
    return made


_BUILDERS: dict[object, Callable[..., Any]] = {}
_INITS: dict[type[Any], Callable[..., None]] = {}


def _init(cls: type[Any], *, frozen: bool) -> Callable[..., None]:
    """The ``__init__`` a dataclass would compile (see :func:`_compile`)."""
    init: Callable[..., None] = _compile(cls, frozen=frozen, build=False)
    _INITS[cls] = init
    return init


def _compile(cls: type[Any], *, frozen: bool, build: bool) -> Callable[..., Any]:
    """The ``__init__`` a dataclass would compile: positional parameters, then keyword-only
    ones, with their defaults and factories, ``__post_init__`` called last; a frozen value's
    fields set through their slots (:func:`_slot_setter`). With ``build``, the same body as a
    function that makes the value and returns it (:func:`builder`)."""
    fields = [f for f in dataclasses.fields(cls) if f.init]
    scope: dict[str, Any] = {"__factory": _FACTORY}
    positional: list[str] = []
    keyword: list[str] = []
    body = []
    for f in fields:
        name, value = f.name, f.name
        if f.default is not MISSING:
            scope[f"__default_{name}"] = f.default
            param = f"{name}=__default_{name}"
        elif f.default_factory is not MISSING:
            scope[f"__make_{name}"] = f.default_factory
            param = f"{name}=__factory"
            value = f"__make_{name}() if {name} is __factory else {name}"
        elif positional and "=" in positional[-1] and not f.kw_only:
            raise TypeError(f"non-default argument {name!r} follows default argument")
        else:
            param = name
        (keyword if f.kw_only else positional).append(param)
        if frozen and not build:
            scope[f"__set_{name}"] = _slot_setter(cls, name)
            body.append(f"__set_{name}(self, {value})")
        else:
            body.append(f"self.{name} = {value}")
    parameters = [*positional, *(["*", *keyword] if keyword else [])]
    if build:
        scope["__cls"] = cls
        if frozen:  # built as its unfrozen twin, then made what it is
            scope["__twin"] = _unfrozen_twin(cls)
            body = ["self = __twin()", *body, "self.__class__ = __cls"]
        else:
            body.insert(0, "self = __cls.__new__(__cls)")
    if hasattr(cls, "__post_init__"):
        body.append("self.__post_init__()")
    if build:
        body.append("return self")
        name, qualname = "build", f"builder({cls.__qualname__})"
    else:
        parameters.insert(0, "self")
        name, qualname = "__init__", f"{cls.__qualname__}.__init__"
    source = f"def {name}({', '.join(parameters)}):\n    " + ("\n    ".join(body) or "pass")
    found: dict[str, Any] = {}
    exec(source, scope, found)  # text made above from the field names only
    function: Callable[..., Any] = found[name]
    function.__module__, function.__qualname__ = cls.__module__, qualname
    function.__annotations__ = {f.name: f.type for f in fields} | {"return": cls if build else None}
    return function


def _unfrozen_twin(cls: type[Any]) -> type[Any]:
    """A subclass of the frozen record ``cls`` with the same slots whose fields are set as a
    plain object's are (an attribute write costs about a fifth of a slot setter's call) and
    whose construction runs no ``__init__``: :func:`builder` builds a value as one and then
    assigns it ``cls`` as its class, which the identical layout allows. No value of it is
    ever seen outside the builder."""
    return type(
        f"_Unfrozen{cls.__name__}",
        (cls,),
        {
            "__slots__": (),
            "__module__": cls.__module__,
            # Both, or the object keeps a Python-level setter: they share one type slot.
            "__setattr__": object.__setattr__,
            "__delattr__": object.__delattr__,
            "__init__": object.__init__,
        },
    )


def _slot_setter(cls: type[Any], name: str) -> Callable[[Any, Any], None]:
    """What sets field ``name`` of a frozen value as it is built: its slot's own setter, which
    costs a third of what ``object.__setattr__`` does (that looks the slot up by name on every
    call); ``object.__setattr__`` for a field that is not a slot."""
    slot = inspect.getattr_static(cls, name, None)
    if isinstance(slot, MemberDescriptorType):
        setter: Callable[[Any, Any], None] = slot.__set__
        return setter
    return partial(_set_by_name, name=name)


def _set_by_name(value: Any, field_value: object, *, name: str) -> None:
    object.__setattr__(value, name, field_value)


_COMPARED: dict[type[Any], tuple[Callable[[Any], tuple[Any, ...]], ...]] = {}


def _values(cls: type[Any]) -> tuple[Callable[[Any], tuple[Any, ...]], ...]:
    """The field values of a value of ``cls`` that its equality and its hash read."""
    found = _COMPARED.get(cls)
    if found is None:
        fields = dataclasses.fields(cls)
        compared = [f.name for f in fields if f.compare]
        hashed = [f.name for f in fields if (f.compare if f.hash is None else f.hash)]
        found = _COMPARED[cls] = (_getter(compared), _getter(hashed))
    return found


def _getter(names: list[str]) -> Callable[[Any], tuple[Any, ...]]:
    if len(names) > 1:
        return attrgetter(*names)
    if names:
        one = attrgetter(names[0])
        return lambda value: (one(value),)
    return lambda value: ()


def _eq(self: Any, other: object) -> bool:
    if other.__class__ is not self.__class__:
        return NotImplemented  # type: ignore[no-any-return]  # as a dataclass's __eq__
    compared = _values(self.__class__)[0]
    same: bool = compared(self) == compared(other)
    return same


def _hash(self: Any) -> int:
    return hash(_values(self.__class__)[1](self))


@recursive_repr()
def _repr(self: Any) -> str:
    shown = (f"{f.name}={getattr(self, f.name)!r}" for f in dataclasses.fields(self) if f.repr)
    return f"{self.__class__.__qualname__}({', '.join(shown)})"


def _frozen_setattr(self: Any, name: str, value: object) -> None:
    raise FrozenInstanceError(f"cannot assign to field {name!r}")


def _frozen_delattr(self: Any, name: str) -> None:
    raise FrozenInstanceError(f"cannot delete field {name!r}")


def _getstate(self: Any) -> list[Any]:
    return [getattr(self, f.name) for f in dataclasses.fields(self)]


def _setstate(self: Any, state: list[Any]) -> None:
    for f, value in zip(dataclasses.fields(self), state, strict=False):
        object.__setattr__(self, f.name, value)  # the fields of a frozen value, unpickled


_FROZEN: dict[str, Callable[..., Any]] = {
    "__setattr__": _frozen_setattr,
    "__delattr__": _frozen_delattr,
    "__getstate__": _getstate,
    "__setstate__": _setstate,
}
