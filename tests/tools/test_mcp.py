"""MCP tools against a real MCP server (tests/support/mcp_server.py, built with the official
SDK): over stdio in a subprocess and over streamable HTTP on 127.0.0.1, including a server that
dies in the middle of a call, one that hangs, one that errs, and one restarted between two calls."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fsm_agent import (
    Agent,
    MCPServerError,
    Model,
    Policy,
    RunHandle,
    StopReason,
    ToolFailureMode,
)
from fsm_agent.events import ModelRequestEvent, ToolProgressEvent
from fsm_agent.fuzzing.engine import Engine
from fsm_agent.machine.bounds import bounds
from fsm_agent.messages import ImagePart, ResourceLinkPart, ToolResult
from fsm_agent.persistence.sqlite import SQLiteCheckpointer
from fsm_agent.policy import ToolOutputSettings
from fsm_agent.providers import AnthropicModel, OpenAIChatModel
from fsm_agent.replay import read_recording, record, replay
from fsm_agent.testing import ScriptedModel, text, tool_call, tool_calls
from fsm_agent.tools.mcp import MCPServer, MCPServerHTTP, MCPServerStdio, MCPTool
from mcp_server import PIXEL
from provider_server import (
    FAST,
    ProviderServer,
    Reply,
    Turn,
    anthropic_json,
    json_reply,
    openai_json,
)

SERVER = str(Path(__file__).resolve().parents[1] / "support" / "mcp_server.py")


def run(coro: Any) -> Any:
    """Run a coroutine in a fresh event loop (the tests use no asyncio plugin)."""
    return asyncio.run(coro)


def stdio(**options: Any) -> MCPServerStdio:
    return MCPServerStdio(sys.executable, [SERVER, "stdio"], **options)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class HTTPServer:
    """The test server on 127.0.0.1:port in a subprocess, which a test may kill and restart."""

    def __init__(self, *options: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.options = options
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, SERVER, "http", str(self.port), *self.options],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                return
            except OSError:
                if self.process.poll() is not None:
                    raise RuntimeError("the MCP test server exited at start") from None
                time.sleep(0.05)
        raise RuntimeError("the MCP test server did not start listening")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def _served() -> Iterator[HTTPServer]:
    server = HTTPServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def http_server() -> Iterator[HTTPServer]:
    """A server of the test's own, which it may kill or restart."""
    yield from _served()


@pytest.fixture(scope="module")
def shared_http_server() -> Iterator[HTTPServer]:
    """One server for the module's tests that leave it running (each server start costs a
    second of CPU, importing the SDK)."""
    yield from _served()


def results(result: Any) -> list[tuple[str, bool]]:
    return [(r.content, r.is_error) for m in result.messages for r in m.tool_results]


def test_stdio_tools_keep_the_servers_schema_and_description() -> None:
    async def main() -> tuple[MCPTool, ...]:
        async with stdio(prefix="t") as server:
            return tuple(t for t in server.tools if isinstance(t, MCPTool))

    tools = {t.name: t for t in run(main())}
    assert set(tools) == {
        "t_add",
        "t_fail",
        "t_reject",
        "t_hang",
        "t_die",
        "t_site_lookup",
        "t_repeat",
        "t_whoami",
        "t_picture",
        "t_logo",
        "t_forecast",
        "t_linked",
        "t_slow",
    }
    add = tools["t_add"].definition
    assert add.description == "Add two integers."
    assert add.parameters["required"] == ["a", "b"]
    assert "title" not in add.parameters
    assert tools["t_site_lookup"].remote_name == "site.lookup"


def test_an_agent_run_calls_mcp_tools_over_stdio() -> None:
    model = ScriptedModel(
        [
            tool_calls(("add", {"a": 2, "b": 3}), ("site_lookup", {"key": "k"})),
            text("5, and the value of k."),
        ]
    )

    async def main() -> Any:
        async with stdio(include={"add", "site.lookup"}) as server:
            return await Agent(model, tools=server.tools).run("Add, then look up.")

    result = run(main())
    assert result.stop_reason is StopReason.COMPLETED
    assert results(result) == [("5", False), ("value of k", False)]
    offered = {t.name: t for t in model.requests[0].tools}
    assert set(offered) == {"add", "site_lookup"}
    assert offered["add"].parameters["properties"] == {
        "a": {"title": "A", "type": "integer"},
        "b": {"title": "B", "type": "integer"},
    }


def test_server_errors_become_error_results_the_model_reads() -> None:
    model = ScriptedModel(
        [
            tool_call("fail", {"reason": "the disk is full"}),
            tool_call("reject", {}),
            tool_call("add", {"a": "x"}),
            tool_call("add", {"a": 1, "b": 2}),
            text("3"),
        ]
    )
    policy = Policy(max_consecutive_errors=5)

    async def main() -> Any:
        async with stdio() as server:
            return await Agent(model, tools=server.tools, policy=policy).run("Try.")

    result = run(main())
    assert result.stop_reason is StopReason.COMPLETED
    (failed, e1), (rejected, e2), (invalid, e3), (added, e4) = results(result)
    assert (e1, e2, e3, e4) == (True, True, True, False)
    assert "MCPServerError" in failed and "the disk is full" in failed
    assert "error -32000: the server refused the request" in rejected
    assert "validation error" in invalid and added == "3"


def test_a_stdio_server_killed_mid_call_gives_an_error_and_the_next_call_reconnects() -> None:
    model = ScriptedModel(
        [tool_call("die", {}), tool_call("whoami", {}), tool_call("whoami", {}), text("ok")]
    )

    async def main() -> tuple[Any, int]:
        async with stdio(timeout_s=60) as server:
            result = await Agent(model, tools=server.tools).run("Go.")
            return result, server.reconnects

    started = time.monotonic()
    result, reconnects = run(main())
    assert time.monotonic() - started < 30  # the death is noticed, not waited out
    (died, e1), (pid, e2), (same, e3) = results(result)
    assert e1 and "went away during the call to 'die'" in died
    assert "may or may not have taken effect" in died
    assert not e2 and not e3 and pid == same and int(pid) > 0
    assert reconnects == 1 and result.stop_reason is StopReason.COMPLETED


def test_a_hanging_tool_is_cut_off_by_its_timeout_and_the_connection_stays_usable() -> None:
    model = ScriptedModel([tool_call("hang", {}), tool_call("add", {"a": 1, "b": 1}), text("2")])

    async def main() -> tuple[Any, int]:
        async with stdio(timeout_s=0.5) as server:
            result = await Agent(model, tools=server.tools).run("Go.")
            return result, server.reconnects

    result, reconnects = run(main())
    assert results(result) == [("Error: tool 'hang' timed out after 0.5 s", True), ("2", False)]
    assert reconnects == 0


def test_the_policy_applies_to_mcp_tools_approval_output_limits_and_the_journal(
    tmp_path: Path,
) -> None:
    model = ScriptedModel(
        [tool_call("repeat", {"text": "ab", "times": 5_000}, id="long"), text("long")]
    )
    checkpointer = SQLiteCheckpointer(tmp_path / "runs.db")
    policy = Policy(tool_output=ToolOutputSettings(max_chars=1_000))

    async def main() -> tuple[Any, Any]:
        async with stdio(needs_approval={"repeat"}) as server:
            agent = Agent(model, tools=server.tools, policy=policy, checkpointer=checkpointer)
            paused = await agent.run("Repeat.")
            assert paused.stop_reason is StopReason.SUSPENDED
            assert paused.resume_handle is not None
            (call,) = paused.pending
            return paused, await agent.resume(paused.resume_handle, {call.id: True})

    paused, done = run(main())
    assert done.ok and done.run_id == paused.run_id
    (cut, is_error), *_ = results(done)
    assert not is_error and "showing 1000 of 10000 characters" in cut
    assert done.run_state.tool_outputs["long"] == "ab" * 5_000
    journal = checkpointer.effects(done.run_id)
    assert [r.kind for r in journal.values()].count("tool") == 1
    (tool_record,) = (r for r in journal.values() if r.kind == "tool")
    assert tool_record.result is not None and "abab" in tool_record.result


def test_mcp_tools_over_streamable_http(shared_http_server: HTTPServer) -> None:
    model = ScriptedModel([tool_call("add", {"a": 20, "b": 22}), text("42")])
    url = shared_http_server.url

    async def main() -> Any:
        async with MCPServerHTTP(url) as server:
            assert repr(server) == f"MCPServerHTTP('{url}')"
            return await Agent(model, tools=server.tools).run("Add.")

    result = run(main())
    assert results(result) == [("42", False)] and result.output == "42"


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_progress_and_images_over_streamable_http(
    shared_http_server: HTTPServer, mode: Any
) -> None:
    """Over streamable HTTP too, in either protocol mode, progress notifications are events and
    an image is a part."""
    model = ScriptedModel([tool_calls(("slow", {"steps": 2}), ("picture", {})), text("ok")])

    async def main() -> list[Any]:
        async with MCPServerHTTP(shared_http_server.url, mode=mode) as server:
            return [e async for e in Agent(model, tools=server.tools).run_stream("Go.")]

    events = run(main())
    assert [e.progress for e in events if isinstance(e, ToolProgressEvent)] == [1, 2]
    (picture,) = model.requests[1].messages[-1].tool_results
    assert picture.parts == (ImagePart(media_type="image/png", data=PIXEL),)


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_an_http_server_restarted_between_calls_is_reconnected(
    http_server: HTTPServer, mode: Any
) -> None:
    model = ScriptedModel([tool_call("whoami", {}), tool_call("whoami", {}), text("ok")])
    first: list[str] = []

    async def restart_after_first(server: MCPServer) -> Any:
        agent = Agent(model, tools=server.tools)
        async for event in agent.run_stream("Who?"):
            if event.type == "tool_result" and not first:
                first.append(event.content)
                await asyncio.to_thread(http_server.stop)
                await asyncio.to_thread(http_server.start)
        return agent

    async def main() -> int:
        async with MCPServerHTTP(http_server.url, mode=mode) as server:
            await restart_after_first(server)
            return server.reconnects

    reconnects = run(main())
    assert first and int(first[0]) > 0
    assert http_server.process is not None
    # the second answer came from the restarted process
    second = model.requests[2].messages[-1].tool_results[0]
    assert not second.is_error and int(second.content) == http_server.process.pid
    assert reconnects == (1 if mode == "legacy" else 0)  # "auto" speaks a sessionless protocol


@pytest.fixture(params=["400", "400-json"])
def refusing_server(request: pytest.FixtureRequest) -> Iterator[HTTPServer]:
    """The test server behind a front that answers an unknown session as TypeScript SDK servers
    do: HTTP 400 and a JSON-RPC error without an id (no content type, or JSON)."""
    server = HTTPServer(request.param)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def test_a_restarted_server_that_answers_400_for_the_old_session_is_reconnected(
    refusing_server: HTTPServer,
) -> None:
    """A server that refuses the old session with 400 after a restart: the call is sent again
    on a new session and answered by the new process; later calls keep working."""
    model = ScriptedModel([*(tool_call("whoami", {}) for _ in range(4)), text("ok")])
    first: list[str] = []

    async def main() -> int:
        async with MCPServerHTTP(refusing_server.url, mode="legacy", timeout_s=20) as server:
            agent = Agent(model, tools=server.tools)
            async for event in agent.run_stream("Who?"):
                if event.type == "tool_result" and not first:
                    first.append(event.content)
                    await asyncio.to_thread(refusing_server.stop)
                    await asyncio.to_thread(refusing_server.start)
            return server.reconnects

    reconnects = run(main())
    assert refusing_server.process is not None
    assert first and int(first[0]) != refusing_server.process.pid
    later = [r for m in model.requests[2:] for r in m.messages[-1].tool_results]
    assert [(r.is_error, int(r.content)) for r in later] == [
        (False, refusing_server.process.pid)
    ] * 3
    assert reconnects == 1


def test_a_400_on_a_session_the_server_still_knows_is_an_error_and_not_sent_again(
    refusing_server: HTTPServer,
) -> None:
    """A call refused with 400 while the session still answers a listing is reported, not sent
    again on a new session."""
    model = ScriptedModel([tool_call("gateway_refused", {}), tool_call("whoami", {}), text(".")])

    async def main() -> tuple[Any, int]:
        async with MCPServerHTTP(refusing_server.url, mode="legacy", timeout_s=20) as server:
            result = await Agent(model, tools=server.tools).run("Go.")
            return result, server.reconnects

    result, reconnects = run(main())
    (refused, e1), (pid, e2) = results(result)
    assert e1 and "answered the call to 'gateway_refused'" in refused and not e2
    assert reconnects == 0 and refusing_server.process is not None
    assert int(pid) == refusing_server.process.pid


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_an_http_server_killed_mid_call_gives_an_error_result(
    http_server: HTTPServer, mode: Any
) -> None:
    model = ScriptedModel([tool_call("die", {}), tool_call("add", {"a": 1, "b": 1}), text("?")])

    async def main() -> Any:
        async with MCPServerHTTP(http_server.url, mode=mode, timeout_s=60) as server:
            return await Agent(model, tools=server.tools).run("Go.")

    started = time.monotonic()
    result = run(main())
    assert time.monotonic() - started < 30  # the death is noticed, not waited out
    (died, e1), (gone, e2) = results(result)
    assert e1 and e2 and "may or may not have taken effect" in died
    assert "cannot connect to MCP server" in gone
    assert result.stop_reason is StopReason.COMPLETED


def test_connecting_to_no_server_raises_a_clear_error() -> None:
    async def main() -> None:
        async with MCPServerHTTP(f"http://127.0.0.1:{free_port()}/mcp", connect_timeout_s=5):
            pass

    with pytest.raises(MCPServerError, match="cannot connect to MCP server"):
        run(main())


def test_tools_outside_the_async_with_are_refused() -> None:
    server = stdio()
    with pytest.raises(MCPServerError, match="async with server"):
        _ = server.tools
    model = ScriptedModel([tool_call("add", {"a": 1, "b": 1}), text("?")])

    async def main() -> Any:
        async with server:
            tools = server.tools
        return await Agent(model, tools=tools).run("Add.")

    ((content, is_error),) = results(run(main()))
    assert is_error and "is not connected" in content


def test_the_sdk_is_imported_only_by_fsm_agent_tools_mcp() -> None:
    code = (
        "import sys, fsm_agent\n"
        "assert 'mcp' not in sys.modules\n"
        "sys.modules['mcp'] = None\n"
        "from fsm_agent import MissingExtraError\n"
        "try:\n"
        "    import fsm_agent.tools.mcp\n"
        "except MissingExtraError as exc:\n"
        "    assert exc.extra == 'mcp' and isinstance(exc, ImportError)\n"
        "    print(exc)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert "[mcp] extra" in out


def test_the_short_path_names_the_same_classes() -> None:
    """``fsm_agent.mcp``, the path the guides used before MCP moved under ``fsm_agent.tools``,
    exports every public name of ``fsm_agent.tools.mcp``, as the same objects."""
    import fsm_agent.mcp as short
    import fsm_agent.tools.mcp as home

    assert short.__all__ == home.__all__
    assert all(getattr(short, name) is getattr(home, name) for name in home.__all__)


def test_a_call_imports_no_module_while_the_event_loop_waits_on_it() -> None:
    """A call imports no module: an import stalls the event loop, and a parallel call whose
    answer sits unread meanwhile runs out its timeout (the SDK imports jsonschema to validate
    the first structured result)."""
    code = (
        "import asyncio, json, sys\n"
        "from fsm_agent import MCPServerError\n"
        "from fsm_agent.tools.mcp import MCPServerStdio\n"
        "async def main():\n"
        f"    async with MCPServerStdio(sys.executable, [{SERVER!r}, 'stdio']) as server:\n"
        "        before = set(sys.modules)\n"
        "        assert (await server.call('add', {'a': 1, 'b': 2})).text == '3'\n"
        "        for name, arguments in (('fail', {'reason': 'no'}), ('reject', {})):\n"
        "            try:\n"
        "                await server.call(name, arguments)\n"
        "            except MCPServerError:\n"
        "                pass\n"
        "        return sorted(set(sys.modules) - before)\n"
        "print(json.dumps(asyncio.run(main())))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert json.loads(out) == []


def test_bounds_count_mcp_tool_calls_like_any_tool_call() -> None:
    policy = Policy(max_tool_calls=2, max_consecutive_errors=10)
    model = ScriptedModel(
        [tool_calls(*[("add", {"a": i, "b": i}) for i in range(4)]), text("done")]
    )

    async def main() -> Any:
        async with stdio(include={"add"}) as server:
            return await Agent(model, tools=server.tools, policy=policy).run("Add.")

    result = run(main())
    limit = bounds(policy).max_tool_executions
    assert limit == 2 and result.tool_executions == limit
    ran = [content for content, is_error in results(result) if not is_error]
    assert ran == ["0", "2"]


def test_the_fuzzer_runs_an_agent_whose_tools_are_a_real_mcp_servers() -> None:
    """Generated scripts call the server's tools (one fails, one errs over JSON-RPC, one hangs
    past its timeout), with cancels, pauses and approvals; every run invariant holds, the
    bounds included."""
    # Invariant 10 compares a run with its uninterrupted twin, so a call must end the same way
    # in both. A tool that answers is given a timeout no busy machine reaches: its answer is a
    # real round trip through a subprocess, which a machine short of CPU can stretch past a
    # short limit in one twin and not the other. Only "hang" keeps a short timeout (every call
    # to it waits that long): it never answers, so it times out in both twins.
    server = stdio(
        include={"add", "fail", "reject", "hang", "whoami"},
        timeout_s=30,
        needs_approval={"whoami"},
    )
    policy = Policy(max_steps=4, max_tool_calls=4)
    called: list[str] = []
    call = server.call

    async def counted(name: str, arguments: dict[str, Any], **options: Any) -> Any:
        called.append(name)
        return await call(name, arguments, **options)

    server.call = counted  # type: ignore[method-assign]

    def make_agent(model: Model) -> Agent[Any, Any]:
        return Agent(model, tools=server.tools, policy=policy)

    engine = Engine(None, seed=21)
    try:
        engine.loop.run_until_complete(server.__aenter__())
        (hang,) = [t for t in server.tools if t.name == "hang"]
        hang.timeout_s = 0.05
        engine.use(make_agent)
        session = engine.run(range(40))
        engine.loop.run_until_complete(server.__aexit__(None, None, None))
    finally:
        engine.close()
    assert session.found is None, session.found
    assert session.examples == 40 and session.invariants > 0
    assert len(session.paths) > 5
    assert {"add", "fail", "reject", "hang"} <= set(called), called


@pytest.mark.parametrize("option", ["include", "needs_approval", "idempotent"])
def test_a_misspelt_tool_name_in_an_option_is_refused(option: str) -> None:
    async def main() -> None:
        async with stdio(**{option: {"add", "delet"}}):
            pass

    with pytest.raises(MCPServerError, match=rf"no tool named 'delet' \(given in {option}\)"):
        run(main())


def test_an_http_servers_name_and_errors_leave_out_the_urls_credentials() -> None:
    url = f"http://user:hunter2@127.0.0.1:{free_port()}/mcp?token=hunter2"
    server = MCPServerHTTP(url, headers={"Authorization": "Bearer hunter2"}, connect_timeout_s=5)
    assert "hunter2" not in server.name and "hunter2" not in repr(server)

    async def main() -> None:
        async with server:
            pass

    with pytest.raises(MCPServerError) as caught:
        run(main())
    assert "cannot connect" in str(caught.value) and "hunter2" not in str(caught.value)


def test_parallel_calls_share_one_connection() -> None:
    model = ScriptedModel(
        [
            tool_calls(*[("add", {"a": i, "b": 1}) for i in range(6)], ("whoami", {})),
            tool_call("whoami", {}),
            text("ok"),
        ]
    )

    async def main() -> tuple[Any, int]:
        async with stdio() as server:
            agent = Agent(model, tools=server.tools, policy=Policy(parallel_tool_calls=True))
            return await agent.run("Add."), server.reconnects

    result, reconnects = run(main())
    *added, (pid, _), (same, _) = results(result)
    assert [content for content, _ in added] == [str(i + 1) for i in range(6)]
    assert pid == same and reconnects == 0


def test_under_tool_failure_mode_fail_a_server_error_ends_the_run_and_is_kept() -> None:
    model = ScriptedModel([tool_call("fail", {"reason": "no"})])
    policy = Policy(tool_failure_mode=ToolFailureMode.FAIL)

    async def main() -> Any:
        async with stdio() as server:
            return await Agent(model, tools=server.tools, policy=policy).run("Fail.")

    result = run(main())
    assert result.stop_reason is StopReason.TOOL_ERROR
    cause = result.error.__cause__
    assert isinstance(cause, MCPServerError)
    assert (cause.server, cause.tool) == (Path(sys.executable).name, "fail")


def test_a_server_that_never_answers_the_handshake_is_given_up_at_the_connect_timeout() -> None:
    silent = MCPServerStdio(
        sys.executable, ["-c", "import time; time.sleep(60)"], connect_timeout_s=1
    )

    async def main() -> None:
        async with silent:
            pass

    started = time.monotonic()
    with pytest.raises(MCPServerError, match="did not connect and list its tools within 1 s"):
        run(main())
    assert time.monotonic() - started < 30  # given up, not waited out (the server sleeps 60 s)


def test_a_recorded_run_with_mcp_tools_replays_with_no_server(tmp_path: Path) -> None:
    model = ScriptedModel(
        [tool_call("add", {"a": 1, "b": 2}), tool_call("fail", {"reason": "x"}), text("3")]
    )
    path = tmp_path / "run.jsonl"

    async def main() -> Any:
        async with stdio(include={"add", "fail"}) as server:
            return await record(Agent(model, tools=server.tools), "Add.", path)

    recorded = run(main())
    (added, e1), (failed, e2) = results(recorded)
    assert (added, e1, e2) == ("3", False, True) and failed.endswith("fail: x")
    report = run(replay(path))
    assert report.ok, report.divergence
    assert [d.name for d in read_recording(path).header.tools] == ["add", "fail"]


def test_a_run_cancelled_during_an_mcp_call_ends_and_the_connection_stays_usable() -> None:
    hanging = ScriptedModel([tool_call("hang", {}), text("never")])
    after = ScriptedModel([tool_call("add", {"a": 2, "b": 2}), text("4")])

    async def main() -> tuple[Any, Any, int]:
        async with stdio(timeout_s=30) as server:
            handle = RunHandle()
            agent = Agent(hanging, tools=server.tools)
            async for event in agent.run_stream("Hang.", handle=handle):
                if event.type == "tool_call":
                    handle.cancel()
            cancelled = handle.result
            done = await Agent(after, tools=server.tools).run("Add.")
            return cancelled, done, server.reconnects

    started = time.monotonic()
    cancelled, done, reconnects = run(main())
    assert time.monotonic() - started < 20
    assert cancelled is not None and cancelled.stop_reason is StopReason.CANCELLED
    ((interrupted, is_error),) = results(cancelled)
    assert is_error and "interrupted (cancel)" in interrupted
    assert results(done) == [("4", False)] and reconnects == 0


# -- content beyond text -------------------------------------------------------------------------
def tool_results_of(result: Any) -> list[ToolResult]:
    return [r for m in result.messages for r in m.tool_results]


def test_images_links_structured_content_and_annotations_are_kept_on_the_result() -> None:
    """An image becomes an image part (and a placeholder line), a resource link a part and a
    line with its name and URI, structured content the ``structured`` value (and the text when
    there is none), the blocks' annotations the metadata."""
    model = ScriptedModel(
        [tool_calls(("picture", {}), ("forecast", {}), ("linked", {})), text("seen")]
    )

    async def main() -> Any:
        async with stdio() as server:
            return await Agent(model, tools=server.tools).run("Look.")

    picture, forecast, linked = tool_results_of(run(main()))
    assert picture.content == "a red pixel\n[image: image/png, 96 base64 characters]"
    assert picture.parts == (ImagePart(media_type="image/png", data=PIXEL),)
    assert picture.metadata["annotations"] == [
        {"index": 1, "type": "image", "audience": ["user", "assistant"], "priority": 0.9}
    ]
    weather = {"city": "Oslo", "celsius": -3, "sky": "snow"}
    assert forecast.structured == weather and json.loads(forecast.content) == weather
    assert linked.content == "[resource link: q3.pdf <file:///reports/q3.pdf>]"
    (link,) = linked.parts
    assert isinstance(link, ResourceLinkPart)
    assert (link.uri, link.name, link.media_type) == (
        "file:///reports/q3.pdf",
        "q3.pdf",
        "application/pdf",
    )


def test_an_mcp_image_reaches_anthropic_as_an_image_block_and_openai_as_a_placeholder() -> None:
    """On the wire, the image of an MCP result is an image block inside Anthropic's
    tool_result, and the placeholder text in OpenAI's tool message (which takes only text)."""

    async def main(model_of: Any, replies: list[Reply]) -> list[Any]:
        async with ProviderServer().script(*replies) as http, stdio() as server:
            model = model_of(http.url)
            try:
                done = await Agent(model, tools=server.tools).run("Look.")
                assert done.ok
            finally:
                await model.aclose()
            return [r.json for r in http.requests]

    call = Turn(calls=[("c1", "picture", {})])
    anthropic = run(
        main(
            lambda url: AnthropicModel("c", base_url=url, api_key="k", timeouts=FAST),
            [json_reply(anthropic_json(call)), json_reply(anthropic_json(Turn(text="red")))],
        )
    )
    (result,) = [b for b in anthropic[1]["messages"][-1]["content"] if b["type"] == "tool_result"]
    assert result["content"] == [
        {"type": "text", "text": "a red pixel"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PIXEL}},
    ]
    openai = run(
        main(
            lambda url: OpenAIChatModel("g", base_url=url, api_key="k", timeouts=FAST),
            [json_reply(openai_json(call)), json_reply(openai_json(Turn(text="red")))],
        )
    )
    tool_message = openai[1]["messages"][-1]
    assert tool_message["role"] == "tool"
    assert tool_message["content"] == "a red pixel\n[image: image/png, 96 base64 characters]"


def test_the_servers_content_order_is_kept_and_user_only_content_is_not_the_models() -> None:
    """Text, an image and text again reach the model in the server's order: as lines (the
    image's placeholder between the texts) where the provider takes only text, as text, image
    and text blocks with no placeholder where it takes the image (Anthropic). Content whose
    audience is the user alone is left out of the model's view and kept in the metadata."""
    image = {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": PIXEL},
    }

    async def main(model_of: Any, replies: list[Reply]) -> tuple[ToolResult, Any]:
        async with ProviderServer().script(*replies) as http, stdio() as server:
            model = model_of(http.url)
            try:
                done = await Agent(model, tools=server.tools).run("Show the logo.")
            finally:
                await model.aclose()
            assert done.ok
            (kept,) = tool_results_of(done)
            return kept, http.requests[1].json

    call = Turn(calls=[("c1", "logo", {})])
    kept, openai = run(
        main(
            lambda url: OpenAIChatModel("g", base_url=url, api_key="k", timeouts=FAST),
            [json_reply(openai_json(call)), json_reply(openai_json(Turn(text="A logo.")))],
        )
    )
    lines = [
        "Here is the logo.",
        "[image: image/png, 96 base64 characters]",
        "The image above is the MCP logo.",
    ]
    assert kept.content.splitlines() == lines
    assert openai["messages"][-1]["content"] == kept.content
    assert kept.parts == (ImagePart(media_type="image/png", data=PIXEL),)
    (for_user,) = kept.metadata["for_user"]
    assert for_user == {
        "index": 3,
        "type": "text",
        "text": "Shown in the app.",
        "annotations": {"audience": ["user"]},
    }
    _, anthropic = run(
        main(
            lambda url: AnthropicModel("c", base_url=url, api_key="k", timeouts=FAST),
            [json_reply(anthropic_json(call)), json_reply(anthropic_json(Turn(text="A logo.")))],
        )
    )
    (result,) = [b for b in anthropic["messages"][-1]["content"] if b["type"] == "tool_result"]
    assert result["content"] == [
        {"type": "text", "text": "Here is the logo."},
        image,
        {"type": "text", "text": "The image above is the MCP logo."},
    ]


def test_progress_of_a_long_call_is_streamed_as_tool_progress_events() -> None:
    """The server's progress notifications arrive as ``tool_progress`` events, in order,
    between the call's ``tool_call`` and ``tool_result`` events."""
    model = ScriptedModel([tool_call("slow", {"steps": 3}), text("done")])

    async def main() -> list[Any]:
        async with stdio() as server:
            agent = Agent(model, tools=server.tools)
            return [e async for e in agent.run_stream("Go slowly.")]

    events = run(main())
    kinds = [e.type for e in events if e.type in ("tool_call", "tool_progress", "tool_result")]
    assert kinds == ["tool_call", *["tool_progress"] * 3, "tool_result"]
    progress = [e for e in events if isinstance(e, ToolProgressEvent)]
    assert [(e.progress, e.total, e.message) for e in progress] == [
        (n, 3, f"step {n} of 3") for n in (1, 2, 3)
    ]
    assert {e.tool_name for e in progress} == {"slow"}


def test_parallel_calls_stream_their_progress_too() -> None:
    """With parallel tool calls, each call's progress is streamed before the turn's results."""
    model = ScriptedModel(
        [tool_calls(("slow", {"steps": 2}), ("slow", {"steps": 3})), text("done")]
    )

    async def main() -> list[Any]:
        async with stdio() as server:
            agent = Agent(model, tools=server.tools, policy=Policy(parallel_tool_calls=True))
            return [e async for e in agent.run_stream("Go slowly, twice.")]

    events = run(main())
    progress = [e for e in events if isinstance(e, ToolProgressEvent)]
    calls = [e.call_id for e in events if e.type == "tool_call"]
    assert sorted((calls.index(e.call_id), e.progress) for e in progress) == [
        (0, 1),
        (0, 2),
        (1, 1),
        (1, 2),
        (1, 3),
    ]
    first_result = next(i for i, e in enumerate(events) if e.type == "tool_result")
    assert all(events.index(e) < first_result for e in progress)


def test_rich_results_round_trip_through_a_checkpoint_and_a_recording(tmp_path: Path) -> None:
    """A result's parts, structured value and annotations come back from a checkpoint and from
    a recording unchanged, the recording replays; a result stored before they existed loads."""
    model = ScriptedModel([tool_calls(("picture", {}), ("linked", {})), text("seen")])
    checkpointer = SQLiteCheckpointer(tmp_path / "runs.db")
    path = tmp_path / "run.jsonl"

    async def main() -> Any:
        async with stdio() as server:
            agent = Agent(model, tools=server.tools, checkpointer=checkpointer)
            return await record(agent, "Look.", path)

    done = run(main())
    kept = tool_results_of(done)
    assert kept[0].parts and kept[1].parts and kept[0].metadata["annotations"]
    saved = checkpointer.load(done.run_id).state.messages
    assert [r for m in saved for r in m.tool_results] == kept
    journal = [r for r in checkpointer.effects(done.run_id).values() if r.kind == "tool"]
    journaled = [ToolResult.model_validate(json.loads(r.result or "")["result"]) for r in journal]
    assert sorted(journaled, key=lambda r: r.call_id) == sorted(kept, key=lambda r: r.call_id)
    requests = [e for e in read_recording(path).events if isinstance(e, ModelRequestEvent)]
    assert [r for m in requests[-1].request.messages for r in m.tool_results] == kept
    report = run(replay(path))
    assert report.ok, report.divergence
    old = {"type": "tool_result", "call_id": "c", "name": "t", "content": "x"}
    assert ToolResult.model_validate(old).parts == ()


def test_a_recording_with_progress_events_replays(tmp_path: Path) -> None:
    """A recorded run whose tool reported progress replays with no server: the recorded tools
    report none, and progress events, like deltas, are not compared."""
    model = ScriptedModel([tool_call("slow", {"steps": 2}), text("ok")])
    path = tmp_path / "run.jsonl"

    async def main() -> Any:
        async with stdio() as server:
            return await record(Agent(model, tools=server.tools), "Go.", path)

    run(main())
    recorded = read_recording(path).events
    assert [e.type for e in recorded].count("tool_progress") == 2
    report = run(replay(path))
    assert report.ok, report.divergence
