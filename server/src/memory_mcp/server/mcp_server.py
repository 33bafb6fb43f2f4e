"""The SDK's MCP server as every client sees it: errors with the spec's codes and without echoes or
library links, tool arguments that refuse typos, and a ``tools/list`` fitted to the client."""

from __future__ import annotations

from typing import Any

from mcp.server.apps import client_supports_apps
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceNotFoundError, ToolError, UnexpectedToolError
from mcp.shared.exceptions import MCPError
from mcp.types import INVALID_PARAMS, METHOD_NOT_FOUND, ListToolsResult, PaginatedRequestParams
from pydantic import ValidationError

# What a rejected argument's pydantic error type means, in words (its input is never repeated).
_PROBLEMS: dict[str, str] = {
    "missing": "required",
    "string_type": "must be a string",
    "int_type": "must be an integer",
    "int_parsing": "must be an integer",
    "int_from_float": "must be an integer",
    "bool_type": "must be true or false",
    "bool_parsing": "must be true or false",
    "string_too_long": "must be at most {max_length} characters",
    "string_too_short": "must be at least {min_length} characters",
    "less_than_equal": "must be at most {le}",
    "greater_than_equal": "must be at least {ge}",
    "less_than": "must be less than {lt}",
    "greater_than": "must be greater than {gt}",
    "literal_error": "must be one of {expected}",
    "extra_forbidden": "is not an argument of this tool",
}
# Names are never echoed: a client's typo can be anything, and errors end up in logs and prompts.
UNKNOWN_TOOL = "Unknown tool: no tool of that name (tools/list names them)"
UNKNOWN_PROMPT = "Unknown prompt: no prompt of that name (prompts/list names them)"
UNKNOWN_RESOURCE = "Unknown resource: nothing at that URI (resources/list names them)"


def argument_problems(exc: ValidationError) -> str:
    """``field: problem`` for each rejected argument, without the values or library links."""
    parts = []
    for error in exc.errors(include_url=False, include_input=False):
        field = ".".join(str(part) for part in error["loc"]) or "arguments"
        template = _PROBLEMS.get(error["type"])
        try:
            problem = template.format(**error.get("ctx", {})) if template else error["msg"].lower()
        except (KeyError, IndexError):
            problem = error["msg"].lower()
        parts.append(f"{field}: {problem}")
    return "; ".join(parts)


def _compact_input(schema: dict[str, Any]) -> dict[str, Any]:
    """An input schema without titles, with optional arguments as their plain type, and closed:
    an argument the tool does not know is refused rather than silently ignored."""
    properties = {}
    for name, prop in schema.get("properties", {}).items():
        prop = {k: v for k, v in prop.items() if k != "title"}
        branches = prop.pop("anyOf", None) if prop.get("default", "") is None else None
        if branches:
            prop.pop("default")
            (other,) = [b for b in branches if b != {"type": "null"}]
            prop.update(other)
        properties[name] = prop
    out = {k: v for k, v in schema.items() if k not in ("title", "properties")}
    return {**out, "properties": properties, "additionalProperties": False}


def _shallow_output(schema: dict[str, Any]) -> dict[str, Any]:
    """An output schema of the top-level fields only: nested results are declared as objects.

    Every tool's full schema repeated the same memory and document definitions (two thirds of
    ``tools/list``); the field lists of nested objects are in docs/clients.md and the REST OpenAPI.
    Each field keeps its type: a bare ``{}`` accepts anything, which Inspector's ``--strict`` flags
    (98 warnings over the 15 tools).
    """

    def shallow(prop: dict[str, Any]) -> dict[str, Any]:
        if "$ref" in prop:
            return {"type": "object"}
        return {"type": prop["type"]}  # an array's items are in the docs with the nested objects

    properties = {name: shallow(prop) for name, prop in schema.get("properties", {}).items()}
    return {"type": "object", "properties": properties}


def _app_only(tool: Any) -> bool:
    ui = (tool.meta or {}).get("ui") or {}
    return isinstance(ui, dict) and ui.get("visibility") == ["app"]


LEAN_OUTPUT = {"type": "object"}


def _lean(tool: Any) -> Any:
    """A tool as a 2026-07-28 client without MCP Apps sees it. A launcher has no widget reference
    and no output schema, as its structured result is the widget's data (such a client reads the
    text). Any other tool's output schema says only that its result is an object: its field names
    (885 of 8,143 characters) tell a model nothing before it calls, and the result it reads names
    them; descriptions, inputs and annotations are whole."""
    if "ui" not in (tool.meta or {}):
        lean = LEAN_OUTPUT if tool.output_schema is not None else None
        return tool.model_copy(update={"output_schema": lean})
    meta = {k: v for k, v in tool.meta.items() if k != "ui"}
    return tool.model_copy(update={"meta": meta or None, "output_schema": None})


async def _without_echoes(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
    """Server middleware: an unknown method's error no longer repeats the method in ``data``."""
    try:
        return await call_next(ctx)
    except MCPError as exc:
        if exc.error.code == METHOD_NOT_FOUND:
            raise MCPError(code=METHOD_NOT_FOUND, message="Method not found") from None
        raise


class MemoryMCPServer(MCPServer):
    """The SDK's server, with argument errors that read ``field: problem``, unknown names answered
    with the spec's -32602, and a compact ``tools/list`` (19.6k characters before, see
    ``_shallow_output``) that shows app-only tools only to clients that declared MCP Apps."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.middleware.append(_without_echoes)

    async def list_tools(self) -> list[Any]:
        tools = await super().list_tools()
        for tool in tools:
            tool.input_schema = _compact_input(tool.input_schema)
            if tool.output_schema is not None:
                tool.output_schema = _shallow_output(tool.output_schema)
        return tools

    async def _handle_list_tools(
        self, ctx: ServerRequestContext[Any], params: PaginatedRequestParams | None
    ) -> ListToolsResult:
        # A tool with visibility ["app"] is for a widget's host to call; a client that cannot show
        # widgets would only hand it to the model (MCP Apps: the host must not).
        tools = await self.list_tools()
        # A handshake-era client declared its capabilities in `initialize`, which a stateless server
        # no longer holds when `tools/list` comes (no capabilities at all): it gets every tool, as
        # before, or a widget host on that protocol would never see its widgets. A client that sends
        # its capabilities with the request (2026-07-28) and declares no MCP Apps gets the lean list.
        if ctx.session.client_capabilities is not None and not client_supports_apps(ctx):
            # Nor do a launcher's widget reference and widget data (880 characters of 8.8k).
            tools = [_lean(tool) for tool in tools if not _app_only(tool)]
        return ListToolsResult(tools=tools)

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        tool = self._tool_manager.get_tool(name)
        if tool is None:
            # A protocol error (-32602), as the spec has it for unknown tools.
            raise MCPError(code=INVALID_PARAMS, message=UNKNOWN_TOOL)
        known = list(tool.parameters.get("properties", {}))
        unknown = len(set(arguments) - set(known))
        if unknown:
            # A tool execution error the model can correct (SEP-1303): it names what the tool takes
            # rather than repeating what it was sent.
            takes = f"this tool takes {', '.join(known)}" if known else "this tool takes none"
            raise ToolError(f"Error executing tool {name}: arguments: {unknown} unknown; {takes}")
        try:
            return await super().call_tool(name, arguments, context)
        except UnexpectedToolError:
            raise
        except ToolError as exc:
            cause = exc.__cause__
            if isinstance(cause, ValidationError):
                raise ToolError(f"Error executing tool {name}: {argument_problems(cause)}") from cause
            raise

    async def get_prompt(
        self, name: str, arguments: dict[str, Any] | None = None, context: Any = None
    ) -> Any:
        if self._prompt_manager.get_prompt(name) is None:
            raise MCPError(code=INVALID_PARAMS, message=UNKNOWN_PROMPT)
        return await super().get_prompt(name, arguments, context)

    async def read_resource(self, uri: Any, context: Any = None) -> Any:
        try:
            return await super().read_resource(uri, context)
        except ResourceNotFoundError:
            raise MCPError(code=INVALID_PARAMS, message=UNKNOWN_RESOURCE) from None
