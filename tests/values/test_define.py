"""``record`` defines the value types with one compiled method instead of six, and each value
type behaves as ``@dataclass(frozen=..., slots=True, kw_only=True)`` would make it."""

from __future__ import annotations

import copy
import dataclasses
import inspect
import pickle
from types import ModuleType
from typing import Any

import pytest

from fsm_agent.run import events, state
from fsm_agent.values import define, messages, model_settings
from fsm_agent.values.define import record
from fsm_agent.values.record import Record

_MODULES = (messages, model_settings, state, events)
RECORDS = [
    cls
    for module in _MODULES
    for cls in vars(module).values()
    if isinstance(cls, type) and dataclasses.is_dataclass(cls) and cls.__module__ == module.__name__
]


def _frozen(cls: type[Any]) -> bool:
    return cls.__hash__ is not None


def _reference(cls: type[Any]) -> type[Any]:
    """The same fields, defaults and ``__post_init__`` under ``dataclasses.dataclass``."""
    specs = []
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            spec = dataclasses.field(default=f.default)
        elif f.default_factory is not dataclasses.MISSING:
            spec = dataclasses.field(default_factory=f.default_factory)
        else:
            spec = dataclasses.field()
        specs.append((f.name, f.type, spec))
    namespace = {"__post_init__": cls.__post_init__} if hasattr(cls, "__post_init__") else {}
    return dataclasses.make_dataclass(
        cls.__name__,
        specs,
        bases=(Record,),
        namespace=namespace,
        frozen=_frozen(cls),
        slots=True,
        kw_only=True,
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
        f.name: f"{f.name}!"
        for f in dataclasses.fields(cls)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    }


def test_the_value_types_are_records() -> None:
    """The modules define their value types with ``record``: messages, model settings, the run
    state and the events are all here."""
    names = {cls.__name__ for cls in RECORDS}
    assert {"Message", "ToolCall", "ModelSettings", "RunState", "HumanRequest"} <= names
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
        assert repr(ours) == repr(theirs)
        assert ours == cls(**kwargs) and theirs == ref(**kwargs)
        assert _outcome(lambda: ours == cls(**other)) == _outcome(  # noqa: B023
            lambda: theirs == ref(**other)  # noqa: B023
        )
        assert (ours == theirs) is False
        assert _outcome(lambda: hash(ours)) == _outcome(lambda: hash(theirs))  # noqa: B023
        assert _outcome(lambda: setattr(ours, name, 1)) == _outcome(  # noqa: B023
            lambda: setattr(theirs, name, 1)  # noqa: B023
        )
        assert _outcome(lambda: delattr(ours, name)) == _outcome(  # noqa: B023
            lambda: delattr(theirs, name)  # noqa: B023
        )
    value = cls(**_required(cls))
    assert pickle.loads(pickle.dumps(value)) == value
    assert copy.copy(value) == value and copy.deepcopy(value) == value


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


def test_post_init_runs_and_a_factory_makes_a_new_default_each_time() -> None:
    """``__post_init__`` runs after the fields are set; a ``default_factory`` is called per
    value, and a value given for its field is kept."""

    @record
    class Value(Record):
        items: list[int] = dataclasses.field(default_factory=list)
        seen: tuple[int, ...] = ()

        def __post_init__(self) -> None:
            object.__setattr__(self, "seen", tuple(self.items))

    first, second = Value(), Value(items=[1])
    assert first.items == [] and first.items is not Value().items
    assert second.seen == (1,)
    with pytest.raises(dataclasses.FrozenInstanceError):
        first.seen = ()  # type: ignore[misc]
