"""Tools from MCP servers: the import path the guides use, kept.

The code lives in :mod:`fsm_agent.tools.mcp`; this module re-exports its public names. It needs
the ``[mcp]`` extra, as that package does.
"""

from __future__ import annotations

from .tools.mcp import MCPServer, MCPServerHTTP, MCPServerStdio, MCPTool

__all__ = ["MCPServer", "MCPServerHTTP", "MCPServerStdio", "MCPTool"]
