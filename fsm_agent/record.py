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
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Literal, TypeVar

if TYPE_CHECKING:
    from typing import Self

    from pydantic import TypeAdapter

__all__ = ["Record", "adapter"]

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
