"""pydantic's field metadata, named in a value type's annotations without importing pydantic.

``from pydantic import Field`` (or ``JsonValue``, ``BeforeValidator``) loads pydantic's model
machinery, about a quarter of what ``from fsm_agent import Agent`` would otherwise cost, while
the value types need it only when a validator is built (at a boundary: a checkpoint, a recording,
a provider's reply). The objects here stand for that metadata in ``Annotated[...]`` and make the
real thing when pydantic asks for their schema (``__get_pydantic_core_schema__``), so a type
validates, serialises and describes itself as JSON schema exactly as with pydantic's own.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any

if TYPE_CHECKING:
    from pydantic import GetCoreSchemaHandler
    from pydantic import JsonValue as JsonValue
    from pydantic_core import CoreSchema

__all__ = ["JsonValue", "Schema", "Stored"]


class Schema:
    """``Annotated[T, Schema(ge=0)]`` validates as ``Annotated[T, pydantic.Field(ge=0)]``: any
    of ``Field``'s keywords (bounds, ``discriminator``, ``description``...), applied when the
    type's validator is built."""

    __slots__ = ("field",)

    def __init__(self, **field: Any) -> None:
        self.field = field

    def __repr__(self) -> str:
        return f"Schema({', '.join(f'{k}={v!r}' for k, v in self.field.items())})"

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> CoreSchema:
        """pydantic's schema of ``source`` under ``Field(**field)``."""
        from pydantic import Field

        return handler.generate_schema(Annotated[source, Field(**self.field)])


class Stored:
    """``Annotated[T, Stored(read, write)]`` validates as ``Annotated[T,
    BeforeValidator(read), PlainSerializer(write)]``: how a value is read from and written to
    its stored form."""

    __slots__ = ("read", "write")

    def __init__(self, read: Callable[[Any], Any], write: Callable[[Any], Any]) -> None:
        self.read = read
        self.write = write

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> CoreSchema:
        """pydantic's schema of ``source``, read through ``read`` and written by ``write``."""
        from pydantic import BeforeValidator, PlainSerializer

        return handler.generate_schema(
            Annotated[source, BeforeValidator(self.read), PlainSerializer(self.write)]
        )


if not TYPE_CHECKING:

    class JsonValue:
        """Any JSON value: validates, serialises and describes itself as
        :data:`pydantic.JsonValue` (type checkers read that one)."""

        @classmethod
        def __get_pydantic_core_schema__(
            cls, source: Any, handler: GetCoreSchemaHandler
        ) -> CoreSchema:
            """pydantic's schema of its ``JsonValue``."""
            from pydantic import JsonValue

            return handler.generate_schema(JsonValue)
