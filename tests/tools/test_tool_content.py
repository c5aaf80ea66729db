"""Tool results beyond text (ToolReturn: image and link parts, a structured value, metadata) and
tools that report their progress (ToolContext.report_progress as tool_progress events)."""

from __future__ import annotations

import asyncio
import threading

from fsm_agent import (
    ImagePart,
    Message,
    ModelRequest,
    Policy,
    ResourceLinkPart,
    ToolCall,
    ToolContext,
    ToolResult,
    ToolReturn,
    tool,
)
from fsm_agent.compaction import estimate_tokens
from fsm_agent.events import ToolProgressEvent
from fsm_agent.persistence.storable import storable_result
from fsm_agent.providers import AnthropicModel, GeminiModel, OpenAIChatModel
from fsm_agent.testing import text, tool_call, tool_calls
from helpers import make_agent, stream

IMAGE = ImagePart(media_type="image/png", data="aGVsbG8=")


@tool
def snapshot() -> ToolReturn:
    """Take a snapshot."""
    return ToolReturn(
        "a snapshot\n[image: image/png]",
        parts=(IMAGE, ResourceLinkPart(uri="file:///snap.png", name="snap.png")),
        structured={"width": 1, "height": 1},
        metadata={"camera": "front"},
    )


def test_a_tool_returning_tool_return_keeps_its_parts_structured_value_and_metadata() -> None:
    """A ToolReturn's text is the content; its parts, structured value and metadata are kept on
    the result."""
    agent, _, _ = make_agent([tool_call("snapshot", {}), text("ok")], tools=[snapshot])
    result = agent.run_sync("Snap.")
    (kept,) = [r for m in result.messages for r in m.tool_results]
    assert kept.content == "a snapshot\n[image: image/png]"
    assert kept.parts[0] == IMAGE and isinstance(kept.parts[1], ResourceLinkPart)
    assert (kept.structured, kept.metadata) == ({"width": 1, "height": 1}, {"camera": "front"})


def test_an_invalid_tool_return_is_an_error_result_and_the_run_goes_on() -> None:
    """A ToolReturn whose structured value is not JSON becomes an error result naming it."""

    @tool
    def broken() -> ToolReturn:
        """Return garbage."""
        return ToolReturn("text", structured={"x": object()})  # type: ignore[dict-item]

    agent, _, _ = make_agent([tool_call("broken", {}), text("ok")], tools=[broken])
    result = agent.run_sync("Go.")
    (kept,) = [r for m in result.messages for r in m.tool_results]
    assert result.ok and kept.is_error and "invalid ToolReturn" in kept.content


def test_providers_send_a_results_image_where_their_wire_format_takes_one() -> None:
    """Anthropic gets the image inside the tool_result; OpenAI and Gemini get the text only."""
    made = ToolCall.create("c1", "snapshot", {})
    call = Message.assistant(tool_calls=[made])
    result = ToolResult(
        call_id=made.id, name="snapshot", content="a snapshot", parts=(IMAGE,), structured={}
    )
    request = ModelRequest(
        messages=(Message.user("Snap."), call, Message.tool(result)),
        tools=(snapshot.definition,),
    )
    anthropic = AnthropicModel("c", api_key="k").build_body(request, stream=False)
    (block,) = anthropic["messages"][-1]["content"]
    assert block["content"] == [
        {"type": "text", "text": "a snapshot"},
        {
            "type": "image",
            "source": {"type": "base64", "media_type": "image/png", "data": "aGVsbG8="},
        },
    ]
    openai = OpenAIChatModel("g", api_key="k").build_body(request, stream=False)
    assert openai["messages"][-1]["content"] == "a snapshot"
    gemini = GeminiModel("m", api_key="k").build_body(request)
    (part,) = gemini["contents"][-1]["parts"]
    assert part["functionResponse"]["response"] == {"result": "a snapshot"}


def test_an_images_placeholder_line_is_where_anthropic_gets_the_image() -> None:
    """A line of a result's text that is an image's placeholder is replaced by the image for
    Anthropic, between the texts around it; the other providers read the text as it is."""
    second = ImagePart(url="https://example.org/b.png")
    made = ToolCall.create("c1", "snapshot", {})
    content = f"before\n{IMAGE.placeholder}\nbetween\n{second.placeholder}"
    result = ToolResult(call_id=made.id, name="snapshot", content=content, parts=(second, IMAGE))
    request = ModelRequest(
        messages=(
            Message.user("Snap."),
            Message.assistant(tool_calls=[made]),
            Message.tool(result),
        ),
        tools=(snapshot.definition,),
    )
    anthropic = AnthropicModel("c", api_key="k").build_body(request, stream=False)
    (block,) = anthropic["messages"][-1]["content"]
    assert block["content"] == [
        {"type": "text", "text": "before"},
        {
            "type": "image",
            "source": {"type": "base64", "media_type": "image/png", "data": "aGVsbG8="},
        },
        {"type": "text", "text": "between"},
        {"type": "image", "source": {"type": "url", "url": "https://example.org/b.png"}},
    ]
    assert IMAGE.placeholder == "[image: image/png, 8 base64 characters]"
    openai = OpenAIChatModel("g", api_key="k").build_body(request, stream=False)
    assert openai["messages"][-1]["content"] == content


def test_tools_report_progress_inline_async_and_from_a_thread() -> None:
    """Progress reported by an async tool, an inline sync tool and a threaded tool arrives as
    tool_progress events before each call's result; without a listener it is a no-op."""

    @tool
    async def fetch(context: ToolContext[None]) -> str:
        """Fetch."""
        context.report_progress(1, 2, "half")
        await asyncio.sleep(0)
        context.report_progress(2, 2)
        return "fetched"

    @tool
    def count(context: ToolContext[None]) -> str:
        """Count."""
        context.report_progress(5)
        return "counted"

    @tool(threaded=True)
    def crunch(context: ToolContext[None]) -> str:
        """Crunch."""
        assert threading.current_thread() is not threading.main_thread()
        context.report_progress(0.5, 1.0, "crunching")
        return "crunched"

    turns = [tool_calls(("fetch", {}), ("count", {}), ("crunch", {})), text("done")]
    for parallel in (False, True):
        agent, _, _ = make_agent(
            turns, tools=[fetch, count, crunch], policy=Policy(parallel_tool_calls=parallel)
        )
        events, result = stream(agent)
        assert result.ok
        seen = [
            (e.tool_name, e.progress, e.total, e.message)
            for e in events
            if isinstance(e, ToolProgressEvent)
        ]
        assert sorted(seen, key=str) == sorted(
            [
                ("fetch", 1, 2, "half"),
                ("fetch", 2, 2, None),
                ("count", 5, None, None),
                ("crunch", 0.5, 1.0, "crunching"),
            ],
            key=str,
        )
        for name in ("fetch", "count", "crunch"):
            done = next(
                i for i, e in enumerate(events) if e.type == "tool_result" and e.tool_name == name
            )
            assert all(
                i < done
                for i, e in enumerate(events)
                if isinstance(e, ToolProgressEvent) and e.tool_name == name
            )
        quiet, _, _ = make_agent(turns, tools=[fetch, count, crunch])
        assert quiet.run_sync("Go.").ok


def test_bad_progress_values_are_an_error_result_that_says_what_to_pass() -> None:
    """report_progress refuses what is not a number (or NaN) with a message; the call fails."""

    @tool
    def sloppy(context: ToolContext[None]) -> str:
        """Report nonsense."""
        context.report_progress("half")  # type: ignore[arg-type]
        return "unreachable"

    agent, _, _ = make_agent([tool_call("sloppy", {}), text("ok")], tools=[sloppy])
    events, result = stream(agent)
    (kept,) = [r for m in result.messages for r in m.tool_results]
    assert kept.is_error and "report_progress takes numbers" in kept.content
    assert not any(isinstance(e, ToolProgressEvent) for e in events)


def test_a_structured_value_or_part_that_cannot_be_stored_is_replaced_with_a_note() -> None:
    """Lone surrogates in a result's structured value or parts are replaced (U+FFFD), and the
    content says so, as for its text."""
    result = ToolResult(
        call_id="c",
        name="t",
        content="ok",
        parts=(ResourceLinkPart(uri="file:///x", name="bad\ud800name"),),
        structured={"key": "\udcff"},
    )
    stored = storable_result(result)
    assert stored.structured == {"key": "\ufffd"}
    (link,) = stored.parts
    assert isinstance(link, ResourceLinkPart) and link.name == "bad\ufffdname"
    assert "2 character(s)" in stored.content
    stored.model_dump_json()  # it can be written now


def test_the_token_estimate_counts_the_images_of_a_tool_result() -> None:
    """An image sent with a tool result counts in the context budget like one in a prompt."""
    bare = ToolResult(call_id="c", name="t", content="a chart")
    with_image = bare.model_copy(update={"parts": (IMAGE,)})
    image_cost = estimate_tokens(Message.user("a chart", IMAGE)) - estimate_tokens(
        Message.user("a chart")
    )
    assert image_cost > 0
    assert (
        estimate_tokens(Message.tool(with_image)) - estimate_tokens(Message.tool(bare))
        == image_cost
    )
