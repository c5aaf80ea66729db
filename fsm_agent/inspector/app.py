"""The inspector's web application (Starlette): static pages, a JSON API over the store, the
run's diagram as SVG, and the one action, answering a suspended run's questions.

Every ``/api`` request needs the access token (``Authorization: Bearer TOKEN``); the pages are
static shells whose script reads the token from the address's ``#token=`` fragment and renders
all data with ``textContent``, so nothing a model wrote is ever parsed as markup. The responses
carry a Content Security Policy that allows only this server's own script.
"""

from __future__ import annotations

import asyncio
import hmac
import json
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from importlib import resources
from typing import Any, TypeVar

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..approval import Approval, HumanDecision, ResumeHandle, apply_decisions
from ..diagrams import RenderingUnavailableError
from ..errors import CheckpointError, ResumeError, UnknownRunError
from ..kernel.agent import Agent
from ..machine.table import State
from ..persistence import Checkpointer
from ..run_state import RunState
from .views import diagram_svg, redact, run_detail, run_row

__all__ = ["SECURITY_HEADERS", "Inspector"]

T = TypeVar("T")

SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
        "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}
"""Headers on every response: only this server's script runs, nothing is framed or cached."""

_STATIC = {
    "app.js": "text/javascript; charset=utf-8",
    "style.css": "text/css; charset=utf-8",
}
_PAGES = {"index": "index.html", "run": "run.html"}
_LISTED = 500  # runs the list shows unless ?limit= says otherwise (newest first)
_CACHED = 1000  # decoded states and drawn diagrams kept, by run and checkpoint version


def _asset(name: str) -> bytes:
    return (resources.files(__package__) / "static" / name).read_bytes()


class _Headers(BaseHTTPMiddleware):
    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        response = await call_next(request)
        response.headers.update(SECURITY_HEADERS)
        return response


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": redact(message)}, status_code=status)


class Inspector:
    """The inspector over ``store``; with ``agent`` it can resume suspended runs (the agent's
    checkpointer must be the same store). ``token`` guards every API request. ``app`` is the
    ASGI application; serve it with :func:`fsm_agent.inspector.serve` or any ASGI server."""

    def __init__(
        self,
        store: Checkpointer,
        *,
        token: str,
        agent: Agent[Any, Any] | None = None,
        store_name: str = "",
    ) -> None:
        if not token:
            raise ValueError("the inspector needs a non-empty access token")
        self.store = store
        self.agent = agent
        self.token = token
        self.store_name = store_name
        self.failures: dict[str, str] = {}  # run id → why its last resume failed
        self._resuming: set[asyncio.Task[None]] = set()
        self._io = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fsm-agent-inspect")
        self._svgs: dict[tuple[str, int], bytes] = {}
        self._states: dict[tuple[str, int], RunState] = {}
        routes = [
            Route("/", self._page("index")),
            Route("/runs/{run_id:path}", self._page("run")),
            Route("/static/{name}", self._static),
            Route("/api/runs", self._guarded(self._runs)),
            Route("/api/runs/{run_id:path}/diagram.svg", self._guarded(self._diagram)),
            Route(
                "/api/runs/{run_id:path}/decisions", self._guarded(self._decide), methods=["POST"]
            ),
            Route("/api/runs/{run_id:path}", self._guarded(self._run)),
        ]
        self.app = Starlette(routes=routes, middleware=[Middleware(_Headers)])

    def close(self) -> None:
        """Stop the store's worker thread (the store itself stays open: its owner closes it)."""
        self._io.shutdown(wait=True)

    # -- plumbing ---------------------------------------------------------------------------------
    async def _read(self, work: Callable[[], T]) -> T:
        """Run blocking store work on the inspector's one store thread."""
        return await asyncio.get_running_loop().run_in_executor(self._io, work)

    def _authorised(self, request: Request) -> bool:
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(
            given.strip().encode(), self.token.encode()
        )

    def _guarded(
        self, endpoint: Callable[[Request], Awaitable[Response]]
    ) -> Callable[[Request], Awaitable[Response]]:
        async def guarded(request: Request) -> Response:
            if not self._authorised(request):
                return _error(
                    401,
                    "missing or wrong access token: open the address fsm-agent inspect printed "
                    "(it ends in #token=…) or send 'Authorization: Bearer TOKEN'",
                )
            try:
                return await endpoint(request)
            except UnknownRunError as exc:
                return _error(404, str(exc))
            except CheckpointError as exc:  # the database is down or locked: try again later
                return _error(503, f"the checkpoint store cannot be read: {exc}")

        return guarded

    def _page(self, name: str) -> Callable[[Request], Awaitable[Response]]:
        async def page(request: Request) -> Response:
            return Response(_asset(_PAGES[name]), media_type="text/html; charset=utf-8")

        return page

    async def _static(self, request: Request) -> Response:
        name = request.path_params["name"]
        if name not in _STATIC:
            return _error(404, f"no static file {name!r}")
        return Response(_asset(name), media_type=_STATIC[name])

    def _state(self, run_id: str, version: int) -> RunState | None:
        """The run's state at ``version`` (cached), or ``None`` when it cannot be read."""
        key = (run_id, version)
        if len(self._states) > _CACHED:
            self._states.clear()
        if key not in self._states:
            try:
                checkpoint = self.store.load(run_id)
            except Exception:  # a checkpoint this version cannot decode: listed without usage
                return None
            self._states[(run_id, checkpoint.version)] = checkpoint.state
            if checkpoint.version != version:
                return checkpoint.state
        return self._states[key]

    # -- the API ----------------------------------------------------------------------------------
    async def _runs(self, request: Request) -> Response:
        state = request.query_params.get("state", "")
        search = request.query_params.get("q", "").strip().lower()
        try:
            limit = max(1, int(request.query_params.get("limit", _LISTED)))
        except ValueError:
            return _error(400, "limit must be a whole number")

        def rows() -> list[Any]:
            found: list[Any] = []
            for summary in self.store.runs():
                if len(found) >= limit:
                    break
                if state and summary.state.value != state:
                    continue
                row = run_row(summary, self._state(summary.run_id, summary.version))
                text = json.dumps([row["run_id"], row["stop_reason"], row["state"]]).lower()
                if search and search not in text:
                    continue
                found.append(row)
            return found

        return JSONResponse(
            {
                "store": redact(self.store_name),
                "can_answer": self.agent is not None,
                "states": [s.value for s in State],
                "runs": await self._read(rows),
            }
        )

    async def _run(self, request: Request) -> Response:
        run_id = request.path_params["run_id"]
        checkpoint = await self._read(lambda: self.store.load(run_id))
        detail = run_detail(checkpoint, can_answer=self.agent is not None)
        detail["resuming"] = self._is_resuming(run_id)
        detail["resume_error"] = redact(self.failures.get(run_id, "")) or None
        return JSONResponse(detail)

    async def _diagram(self, request: Request) -> Response:
        run_id = request.path_params["run_id"]
        checkpoint = await self._read(lambda: self.store.load(run_id))
        key = (run_id, checkpoint.version)
        if len(self._svgs) > _CACHED:
            self._svgs.clear()
        if key not in self._svgs:
            try:
                self._svgs[key] = await self._read(lambda: diagram_svg(checkpoint.state))
            except RenderingUnavailableError as exc:
                return _error(501, str(exc))
        return Response(self._svgs[key], media_type="image/svg+xml")

    async def _decide(self, request: Request) -> Response:
        run_id = request.path_params["run_id"]
        if self.agent is None:
            return _error(
                409,
                "this inspector is read-only: start it with an agent to answer "
                "(fsm-agent inspect STORE --agent module:factory, or serve(store, agent=...))",
            )
        if self._is_resuming(run_id):
            return _error(409, f"run {run_id!r} is already being resumed")
        try:
            body = await request.json()
            decisions = _decisions(body)
        except (ValueError, TypeError) as exc:
            return _error(400, f"bad decisions: {exc}")
        try:
            checkpoint = await self._read(lambda: self.store.load(run_id))
            # Check the answers against a copy first, so a mistake is reported here, not lost
            # in the background resume.
            apply_decisions(ResumeHandle.of(checkpoint.state.model_copy(deep=True)), decisions)
        except UnknownRunError as exc:
            return _error(404, str(exc))
        except ResumeError as exc:
            return _error(409, str(exc))
        self.failures.pop(run_id, None)
        task = asyncio.create_task(self._resume(run_id, decisions), name=run_id)
        self._resuming.add(task)
        task.add_done_callback(self._resuming.discard)
        return JSONResponse({"resuming": run_id}, status_code=202)

    def _is_resuming(self, run_id: str) -> bool:
        return any(task.get_name() == run_id for task in self._resuming)

    async def _resume(self, run_id: str, decisions: Mapping[str, HumanDecision]) -> None:
        assert self.agent is not None
        try:
            await self.agent.resume(run_id, decisions)
        except Exception as exc:  # shown on the run's page; the run's checkpoint says the rest
            self.failures[run_id] = f"{type(exc).__name__}: {exc}"


def _decisions(body: object) -> dict[str, HumanDecision]:
    """The decisions a page posted: ``{"decisions": {call_id: {"decision": "allow" | "deny" |
    "answer", "text": "…"}}}``."""
    if not isinstance(body, dict) or not isinstance(body.get("decisions"), dict):
        raise ValueError('expected {"decisions": {call_id: {"decision": ...}}}')
    decided: dict[str, HumanDecision] = {}
    for call_id, value in body["decisions"].items():
        if not isinstance(value, dict):
            raise ValueError(f"call {call_id!r}: expected an object")
        kind, text = value.get("decision"), value.get("text")
        if text is not None and not isinstance(text, str):
            raise ValueError(f"call {call_id!r}: text must be a string")
        if kind == "allow":
            decided[call_id] = Approval.allow()
        elif kind == "deny":
            decided[call_id] = Approval.deny(text or "denied in the inspector")
        elif kind == "answer":
            decided[call_id] = text or ""
        else:
            raise ValueError(f"call {call_id!r}: decision must be allow, deny or answer")
    return decided
