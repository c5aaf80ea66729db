"""An MCP server's tool as an fsm_agent tool."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Protocol, TypeAlias

import mcp_types
from pydantic import ValidationError

from ...errors import MCPServerError
from ...values.messages import ToolDefinition
from .. import Tool, ToolContext, ToolReturn

__all__ = ["MCPTool", "Progress", "ToolServer"]

Progress: TypeAlias = Callable[[float, float | None, str | None], None]
"""Told of a call's progress: how far (``progress``), of how much (``total``), and a message."""


class ToolServer(Protocol):
    """What an :class:`MCPTool` uses of its server (an ``MCPServer``): its name, and a call of
    one of its tools."""

    name: str

    async def call(
        self, name: str, arguments: dict[str, Any], *, progress: Progress | None = None
    ) -> ToolReturn:
        """Call the server's tool ``name`` with ``arguments``."""
        ...


class MCPTool(Tool):
    """A tool of an MCP server: its schema and description are the server's, and a call goes
    to the server through ``server`` (see :meth:`~fsm_agent.tools.mcp.MCPServer.call`)."""

    def __init__(
        self,
        server: ToolServer,
        listed: mcp_types.Tool,
        *,
        name: str,
        timeout_s: float | None,
        needs_approval: bool,
        idempotent: bool,
    ) -> None:
        remote = listed.name

        async def call(arguments: str, context: ToolContext[object]) -> ToolReturn:
            return await server.call(
                remote, _arguments(remote, arguments), progress=context.report_progress
            )

        super().__init__(
            call,
            name=name,
            description=listed.description or listed.title or "",
            timeout_s=timeout_s,
            raw_arguments=True,
            needs_approval=needs_approval,
            idempotent=idempotent,
        )
        self.server = server
        self.remote_name = remote
        schema = {k: v for k, v in listed.input_schema.items() if k != "title"}
        try:
            self.definition = ToolDefinition(
                name=name, description=self.description, parameters=schema
            )
        except ValidationError as exc:
            raise MCPServerError(
                f"MCP server {server.name!r} lists tool {remote!r} with an input schema that is "
                f"not JSON: {exc}",
                server=server.name,
                tool=remote,
            ) from exc

    def __repr__(self) -> str:
        return f"MCPTool({self.name!r} on {self.server.name!r})"


def _arguments(tool: str, raw: str) -> dict[str, Any]:
    try:
        value = json.loads(raw) if raw.strip() else {}
    except (ValueError, RecursionError) as exc:
        raise ValueError(
            f"the arguments for tool {tool!r} are not valid JSON ({exc}); send a JSON object"
        ) from exc
    if not isinstance(value, dict):
        raise ValueError(
            f"the arguments for tool {tool!r} must be a JSON object, not {type(value).__name__}"
        )
    return value
