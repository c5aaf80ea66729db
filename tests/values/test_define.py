"""``record`` defines the value types with one compiled method instead of six, and each value
type behaves as ``@dataclass(frozen=..., slots=True, kw_only=True)`` would make it."""

from __future__ import annotations

import copy
import dataclasses
import inspect
import pickle
import re
from types import ModuleType
from typing import Any

import pytest

from fsm_agent import compaction, persistence
from fsm_agent.analysis import bounds
from fsm_agent.kernel import composition, hooks, plan, run, sharing
from fsm_agent.kernel.states import verifying
from fsm_agent.machine import guards, table
from fsm_agent.phases import table as phases
from fsm_agent.run import approval, events, output, state
from fsm_agent.tools import base as tools
from fsm_agent.values import define, messages, model_settings
from fsm_agent.values.define import record
from fsm_agent.values.record import Record

_MODULES = (
    messages,
    model_settings,
    state,
    events,
    approval,
    output,
    guards,
    table,
    bounds,
    compaction,
    persistence,
    phases,
    run,
    hooks,
    composition,
    plan,
    sharing,
    verifying,
    tools,
)
RECORDS = [
    cls
    for module in _MODULES
    for cls in vars(module).values()
    if isinstance(cls, type)
    and dataclasses.is_dataclass(cls)
    and cls.__eq__ is define._eq  # defined by record
    and cls.__init__.__module__ == module.__name__  # here (a public one's __module__ is moved)
]


_ADDRESS = re.compile(r" at 0x[0-9a-f]+")  # a default made by a factory is a new object


def _frozen(cls: type[Any]) -> bool:
    return cls.__hash__ is not None


def _reference(cls: type[Any]) -> type[Any]:
    """The same fields, defaults and ``__post_init__`` under ``dataclasses.dataclass``."""
    specs = []
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            spec = dataclasses.field(default=f.default, kw_only=f.kw_only, compare=f.compare)
        elif f.default_factory is not dataclasses.MISSING:
            spec = dataclasses.field(
                default_factory=f.default_factory, kw_only=f.kw_only, compare=f.compare
            )
        else:
            spec = dataclasses.field(kw_only=f.kw_only, compare=f.compare)
        specs.append((f.name, f.type, spec))
    namespace = {"__post_init__": cls.__post_init__} if hasattr(cls, "__post_init__") else {}
    return dataclasses.make_dataclass(
        cls.__name__,
        specs,
        bases=(Record,) if issubclass(cls, Record) else (),
        namespace=namespace,
        frozen=_frozen(cls),
        slots=True,
    )


def _outcome(call: Any) -> object:
    """What ``call()`` returns, or the type and text of what it raises."""
    try:
        return call()
    except Exception as error:
        return (type(error), str(error))


def _required(cls: type[Any]) -> dict[str, str]:
    """A value for each field without a default (the constructor checks no type)."""
    return {
        f.name: "value"
        for f in dataclasses.fields(cls)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    }


def test_the_value_types_are_records() -> None:
    """The modules define their value types with ``record``: messages, model settings, the run
    state, the events and the kernel's values are all here."""
    names = {cls.__name__ for cls in RECORDS}
    assert {"Message", "ToolCall", "ModelSettings", "RunState", "HumanRequest", "Row"} <= names
    assert sum(cls.__module__ == events.__name__ for cls in RECORDS) == 29  # _Event included


@pytest.mark.parametrize("cls", RECORDS, ids=lambda cls: cls.__name__)
def test_a_record_behaves_as_the_dataclass_decorator_makes_it(cls: type[Any]) -> None:
    """Signature, repr, equality, hash, frozenness, copy and pickling of a value type equal
    those of the same class made by ``@dataclass(frozen=..., slots=True, kw_only=True)``."""
    ref = _reference(cls)
    assert str(inspect.signature(cls)) == str(inspect.signature(ref))
    assert [f.name for f in dataclasses.fields(cls)] == [f.name for f in dataclasses.fields(ref)]
    assert not hasattr(cls(**_required(cls)), "__dict__")
    for name in [f.name for f in dataclasses.fields(cls)]:
        kwargs = _required(cls)
        ours, theirs = cls(**kwargs), ref(**kwargs)
        other = {**kwargs, name: "changed"}
        if vars(cls).get("__repr__") is define._repr:  # not one of its own
            assert _ADDRESS.sub("", repr(ours)) == _ADDRESS.sub("", repr(theirs))
        assert (ours == cls(**kwargs)) == (theirs == ref(**kwargs))
        assert _outcome(lambda: ours == cls(**other)) == _outcome(  # noqa: B023
            lambda: theirs == ref(**other)  # noqa: B023
        )
        assert (ours == theirs) is False
        hashed = _outcome(lambda: hash(ours))  # noqa: B023
        ref_hashed = _outcome(lambda: hash(theirs))  # noqa: B023
        assert type(hashed) is type(ref_hashed)
        if isinstance(hashed, int) and ours == (again := cls(**kwargs)):
            assert hash(again) == hashed
        assert _outcome(lambda: setattr(ours, name, 1)) == _outcome(  # noqa: B023
            lambda: setattr(theirs, name, 1)  # noqa: B023
        )
        assert _outcome(lambda: delattr(ours, name)) == _outcome(  # noqa: B023
            lambda: delattr(theirs, name)  # noqa: B023
        )
    value = cls(**_required(cls))
    for copied in (pickle.loads(pickle.dumps(value)), copy.copy(value), copy.deepcopy(value)):
        assert type(copied) is cls
        assert _ADDRESS.sub("", define._repr(copied)) == _ADDRESS.sub("", define._repr(value))


def test_a_record_compiles_one_method_where_the_dataclass_decorator_compiles_six(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What makes importing the value types cheap: ``record`` compiles the ``__init__`` alone,
    where ``@dataclass(frozen=True, slots=True, kw_only=True)`` compiles six methods."""
    compiled: list[ModuleType] = []

    def counting(module: ModuleType) -> Any:
        def exec_(*args: Any) -> None:
            compiled.append(module)
            exec(*args)

        return exec_

    monkeypatch.setattr(define, "exec", counting(define), raising=False)
    monkeypatch.setattr(dataclasses, "exec", counting(dataclasses), raising=False)

    class Value(Record):
        a: int
        b: str = ""

    record(Value)
    assert compiled == [define]
    compiled.clear()
    dataclasses.dataclass(frozen=True, slots=True, kw_only=True)(Value)
    assert compiled == [dataclasses] * 6


@record
class _Seen(Record):
    """A record with a factory default and a ``__post_init__`` that sets another field."""

    items: list[int] = dataclasses.field(default_factory=list)
    seen: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "seen", tuple(self.items))


def test_post_init_runs_and_a_factory_makes_a_new_default_each_time() -> None:
    """``__post_init__`` runs after the fields are set; a ``default_factory`` is called per
    value, and a value given for its field is kept."""
    first, second = _Seen(), _Seen(items=[1])
    assert first.items == [] and first.items is not _Seen().items
    assert second.seen == (1,)
    with pytest.raises(dataclasses.FrozenInstanceError):
        first.seen = ()  # type: ignore[misc]


def test_a_record_is_subclassed_as_a_dataclass_is() -> None:
    """A frozen record's ``@dataclass(frozen=True)`` subclass is a frozen dataclass of its
    fields and more; mixing frozen and not frozen is refused, as between dataclasses."""

    @record(kw_only=False)
    class Base(Record):
        a: int

    @dataclasses.dataclass(frozen=True)
    class Sub(Base):
        b: int = 0

    value = Sub(1, 2)
    assert (value.a, value.b) == (1, 2) and value == Sub(1, 2) and value != Sub(1, 3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        value.a = 3  # type: ignore[misc]
    with pytest.raises(TypeError, match="cannot inherit non-frozen dataclass from a frozen one"):
        record(frozen=False)(type("Mutable", (Base,), {"__annotations__": {"c": int}}))
    with pytest.raises(TypeError, match="cannot inherit non-frozen dataclass from a frozen one"):
        dataclasses.dataclass(type("Mutable", (Base,), {"__annotations__": {"c": int}}))


def test_an_undocumented_record_is_documented_by_its_signature() -> None:
    """A record without a docstring gets the one a dataclass gives (its name and signature),
    read from the compiled ``__init__`` rather than from ``object.__init__``'s text, which would
    compile the tokenizer's expressions at import."""
    assert events._Event.__doc__ == _reference(events._Event).__doc__ == "_Event(*, run_id: 'str')"


@pytest.mark.parametrize("cls", RECORDS, ids=lambda cls: cls.__name__)
def test_a_builder_makes_what_the_class_makes(cls: type[Any]) -> None:
    """``builder(cls)`` takes the constructor's parameters and builds an equal value of the
    same type (defaults, factories and ``__post_init__`` included), as frozen as one the
    class built; a record that defines its own ``__init__`` has no builder."""
    if vars(cls).get("__init__") is not define._INITS[cls]:
        with pytest.raises(TypeError, match="not a type defined by @record"):
            define.builder(cls)
        return
    build = define.builder(cls)
    parameters = inspect.signature(build).parameters
    assert list(parameters.values()) == list(inspect.signature(cls).parameters.values())
    kwargs = _required(cls)
    built, made = _outcome(lambda: build(**kwargs)), _outcome(lambda: cls(**kwargs))
    if isinstance(made, tuple):  # __post_init__ refused the values: the builder too
        assert built == made
        return
    assert type(built) is cls
    assert _ADDRESS.sub("", define._repr(built)) == _ADDRESS.sub("", define._repr(made))
    name = dataclasses.fields(cls)[0].name
    assert _outcome(lambda: setattr(built, name, 1)) == _outcome(lambda: setattr(made, name, 1))
    copied = pickle.loads(pickle.dumps(built))
    assert type(copied) is cls
    assert _ADDRESS.sub("", define._repr(copied)) == _ADDRESS.sub("", define._repr(made))


def test_a_builder_is_refused_for_other_types_and_runs_post_init() -> None:
    """Only a record type has a builder; a builder's value has its factories' fresh defaults
    and what its ``__post_init__`` set."""
    build = define.builder(_Seen)
    assert build(items=[2]).seen == (2,)
    assert build().items == [] and build().items is not build().items
    for other in (dict, type("Plain", (), {})):
        with pytest.raises(TypeError, match="not a type defined by @record"):
            define.builder(other)
