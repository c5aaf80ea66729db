"""The inspector's web application (Starlette): static pages, a JSON API over the store, the
run's diagram and each state's detail as SVG, and two actions: answering a suspended run's
questions, and forking a run from one of its moves (a new run from the state saved after it,
through the same code as :meth:`fsm_agent.Agent.fork`, continued by the inspector's agent).

Every ``/api`` request needs the access token (``Authorization: Bearer TOKEN``), except the
reading ones when the inspector was started with ``public_read``; answering and forking always
need it, and an agent (without one the inspector is read-only: 409). The
pages are static shells whose script takes the token from the address's ``#token=`` fragment
(or asks for it) and renders all data with ``textContent``, so nothing a model wrote is ever
parsed as markup. The responses carry a Content Security Policy that allows only this server's
own script.

Of several answers to one suspended run, one is taken and the others are refused (409), also
across inspectors and workers sharing the store: an answer is accepted (202) only once its
decisions are stored as the run's next checkpoint, written by the store's compare-and-set on the
checkpoint version that was checked, so of answers racing from several processes exactly one is
stored and resumes the run, and the others are told what was decided.
"""

from __future__ import annotations

import asyncio
import copy
import hmac
import json
import logging
from collections.abc import Awaitable, Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from importlib import resources
from typing import Any, TypeVar

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..diagrams import RenderingUnavailableError
from ..errors import (
    CheckpointConflictError,
    CheckpointError,
    ConfigurationError,
    CorruptCheckpointError,
    DefinitionChangedError,
    InvalidInputError,
    ResumeError,
    SchemaVersionError,
    UnknownRunError,
)
from ..kernel.agent import Agent
from ..kernel.context import RunContext
from ..kernel.driver import drive
from ..kernel.fork import fork_run
from ..kernel.plan import plan_of
from ..kernel.resuming import resume_context
from ..machine.table import TERMINAL, State
from ..persistence import Checkpoint, Checkpointer
from ..run.approval import Approval, HumanDecision, ResumeHandle, apply_decisions
from .views import (
    decided,
    diagram_svg,
    forks_of,
    grouped,
    redact,
    run_detail,
    run_row,
    state_svg,
)

__all__ = ["SECURITY_HEADERS", "Inspector"]

T = TypeVar("T")

_log = logging.getLogger("fsm_agent.inspector")

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
_PAGES = {"index": "index.html", "run": "run.html", "state": "state.html"}
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
    checkpointer must be the same store). ``token`` guards every API request; with
    ``public_read`` reading needs no token (the list, a run, the pictures) and only answering
    does. ``app`` is the ASGI application; serve it with :func:`fsm_agent.inspector.serve` or
    any ASGI server."""

    def __init__(
        self,
        store: Checkpointer,
        *,
        token: str,
        agent: Agent[Any, Any] | None = None,
        store_name: str = "",
        public_read: bool = False,
    ) -> None:
        if not token:
            raise ValueError("the inspector needs a non-empty access token")
        self.store = store
        self.agent = agent
        self.token = token
        self.store_name = store_name
        self.public_read = public_read
        # run id → (the checkpoint version it was left at, why its last resume failed): shown
        # while the run stays at that version, so a run that moved on shows no stale failure
        self.failures: dict[str, tuple[int | None, str]] = {}
        self._claimed: set[str] = set()  # runs an answer was accepted for, until resumed
        self._resuming: set[asyncio.Task[None]] = set()
        self._io = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fsm-agent-inspect")
        self._svgs: dict[tuple[str, int], bytes] = {}
        self._checkpoints: dict[tuple[str, int], Checkpoint] = {}
        self._forked_from: dict[str, str | None] = {}  # by run id: set once, when forked
        read = self._readable
        routes = [
            Route("/", self._page("index")),
            Route("/runs/{run_id:path}", self._page("run")),
            Route("/states/{state}", self._page("state")),
            Route("/static/{name}", self._static),
            Route("/api/runs", read(self._runs)),
            Route("/api/states", read(self._states)),
            Route("/api/states/{state}.svg", read(self._state_diagram)),
            Route("/api/runs/{run_id:path}/diagram.svg", read(self._diagram)),
            Route(
                "/api/runs/{run_id:path}/decisions", self._guarded(self._decide), methods=["POST"]
            ),
            Route("/api/runs/{run_id:path}/fork", self._guarded(self._fork), methods=["POST"]),
            Route("/api/runs/{run_id:path}", read(self._run)),
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

    def _readable(
        self, endpoint: Callable[[Request], Awaitable[Response]]
    ) -> Callable[[Request], Awaitable[Response]]:
        """A reading endpoint: guarded by the token unless reading is public."""
        return self._guarded(endpoint, public=self.public_read)

    def _guarded(
        self, endpoint: Callable[[Request], Awaitable[Response]], *, public: bool = False
    ) -> Callable[[Request], Awaitable[Response]]:
        async def guarded(request: Request) -> Response:
            if not public and not self._authorised(request):
                return _error(
                    401,
                    "missing or wrong access token: open the address fsm-agent inspect printed "
                    "(it ends in #token=…) or send 'Authorization: Bearer TOKEN'",
                )
            try:
                return await endpoint(request)
            except UnknownRunError as exc:
                return _error(404, str(exc))
            except (CorruptCheckpointError, SchemaVersionError) as exc:  # this run, not the store
                return _error(422, f"this run cannot be read: {exc}")
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

    def _checkpoint(self, run_id: str, version: int) -> Checkpoint | str:
        """The run's checkpoint ``version`` (cached), or why it cannot be read."""
        key = (run_id, version)
        if len(self._checkpoints) > _CACHED:
            self._checkpoints.clear()
        if key not in self._checkpoints:
            try:
                checkpoint = self.store.load(run_id)
            except UnknownRunError:  # deleted since the list was read
                return "its checkpoints are gone"
            except (CorruptCheckpointError, SchemaVersionError) as exc:  # listed, flagged
                return f"its checkpoint cannot be read: {exc}"
            except CheckpointError:  # the store is down: the list cannot be read either
                raise
            except Exception as exc:  # a store of another kind that does not wrap its errors
                return f"its checkpoint cannot be read: {type(exc).__name__}: {exc}"
            self._checkpoints[(run_id, checkpoint.version)] = checkpoint
            if checkpoint.version != version:
                return checkpoint
        return self._checkpoints[key]

    def _forks(self, run_id: str) -> Iterator[Checkpoint]:
        """The latest checkpoint of each stored fork of ``run_id``. Where a run was forked from
        never changes, so each run's checkpoint is read once for it, not on every request."""
        for summary in self.store.runs():
            if summary.problem is not None:
                continue
            if summary.run_id not in self._forked_from:
                first = self._checkpoint(summary.run_id, summary.version)
                if isinstance(first, str):
                    continue
                self._forked_from[summary.run_id] = first.state.forked_from
            if self._forked_from[summary.run_id] == run_id:
                checkpoint = self._checkpoint(summary.run_id, summary.version)
                if not isinstance(checkpoint, str):
                    yield checkpoint

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
                if state and (summary.state.value if summary.state else "unknown") != state:
                    continue
                checkpoint: Checkpoint | str | None = None
                if summary.problem is None:
                    checkpoint = self._checkpoint(summary.run_id, summary.version)
                if isinstance(checkpoint, str):
                    summary, checkpoint = replace(summary, problem=checkpoint), None
                row = run_row(summary, checkpoint)
                shown = ("run_id", "task", "model", "state", "stop_reason", "ending")
                text = json.dumps([row[name] for name in shown], ensure_ascii=False).lower()
                if search and search not in text:
                    continue
                found.append(row)
            return grouped(found)

        return JSONResponse(
            {
                "store": redact(self.store_name),
                "can_answer": self.agent is not None,
                "public_read": self.public_read,
                "states": [s.value for s in State],
                "runs": await self._read(rows),
            }
        )

    async def _run(self, request: Request) -> Response:
        run_id = request.path_params["run_id"]
        checkpoint = await self._read(lambda: self.store.load(run_id))
        detail = run_detail(checkpoint, can_answer=self.agent is not None)
        detail["forks"] = await self._read(lambda: forks_of(self._forks(run_id)))
        detail["resuming"] = self._is_resuming(run_id)
        failed = self.failures.get(run_id)
        shown = failed is not None and failed[0] in (None, checkpoint.version)
        detail["resume_error"] = redact(failed[1]) if failed is not None and shown else None
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

    async def _states(self, request: Request) -> Response:
        return JSONResponse(
            {"states": [s.value for s in State], "terminal": [s.value for s in TERMINAL]}
        )

    async def _state_diagram(self, request: Request) -> Response:
        name = request.path_params["state"]
        try:
            state = State(name)
        except ValueError:
            known = ", ".join(s.value for s in State)
            return _error(404, f"no state {name!r}: the states are {known}")
        if state in TERMINAL:
            return _error(404, f"{state.value} is where a run ends: no rows leave it")
        key = (f"state:{state.value}", 0)
        if key not in self._svgs:
            try:
                self._svgs[key] = await self._read(lambda: state_svg(state))
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
        # Claimed before the first await: of answers arriving together, one passes this line.
        if run_id in self._claimed:
            return _error(409, f"run {run_id!r} is already being resumed")
        self._claimed.add(run_id)
        try:
            decisions = await self._checked(run_id, request)
            ctx = await self._stored(run_id, decisions)
        except _Refused as refused:
            self._claimed.discard(run_id)
            return refused.response
        except BaseException:
            self._claimed.discard(run_id)
            raise
        self.failures.pop(run_id, None)
        self._start(run_id, drive(ctx))
        return JSONResponse({"resuming": run_id}, status_code=202)

    async def _stored(self, run_id: str, decisions: Mapping[str, HumanDecision]) -> RunContext:
        """Store the decisions as the run's next checkpoint (the agent's claim of a resume: the
        store's compare-and-set on the version of the checkpoint they were applied to), and
        return the resumed run to drive. :class:`_Refused` (409, with what was decided) when
        another inspector or worker answered the run first."""
        assert self.agent is not None
        try:
            return await resume_context(
                self.agent,
                run_id,
                decisions,
                handle=None,
                deps=None,
                model_settings=None,
                listening=False,
                allow_changed=False,
            )
        except (CheckpointConflictError, ResumeError) as exc:
            latest = await self._read(lambda: self.store.load(run_id))
            raise _Refused(_refusal(latest, decisions, exc)) from None

    def _start(self, run_id: str, work: Awaitable[object]) -> None:
        """Continue the claimed run ``run_id`` by ``work`` in the background (an error it
        raises is kept to be shown on the run's page); its claim ends with it."""
        task = asyncio.create_task(self._failing(run_id, work), name=run_id)
        self._resuming.add(task)

        def resumed(task: asyncio.Task[None]) -> None:
            self._resuming.discard(task)
            self._claimed.discard(run_id)

        task.add_done_callback(resumed)

    async def _fork(self, request: Request) -> Response:
        """Fork the run from the move the request names (``{"at": n}``) and continue the fork
        in the background unless it waits for a human: 201 with the fork's run id."""
        run_id = request.path_params["run_id"]
        if self.agent is None:
            return _error(
                409,
                "this inspector is read-only: start it with an agent to fork runs "
                "(fsm-agent inspect STORE --agent module:factory, or serve(store, agent=...))",
            )
        try:
            body = await request.json()
        except ValueError:
            body = None
        at = body.get("at") if isinstance(body, dict) else None
        if type(at) is not int or at < 1:
            return _error(400, 'expected {"at": n}: the move (1 or more) to fork the run from')
        try:
            state = await fork_run(
                self.store,
                run_id,
                self.agent.runtime.new_id(),
                at=at,
                definition=plan_of(self.agent).definition,
            )
        except (InvalidInputError, ConfigurationError, DefinitionChangedError) as exc:
            return _error(409, str(exc))
        fork_id = state.run_id
        waits = state.state is State.SUSPENDED
        if not waits:
            self._claimed.add(fork_id)
            self._start(fork_id, self.agent.resume(fork_id, {}))
        return JSONResponse(
            {
                "run_id": fork_id,
                "forked_from": run_id,
                "forked_at": state.forked_at,
                "page": f"/runs/{fork_id}",
                "resuming": not waits,
            },
            status_code=201,
        )

    async def _checked(self, run_id: str, request: Request) -> dict[str, HumanDecision]:
        """The request's decisions, checked against a copy of the run's latest checkpoint (so
        a mistake is reported here, not lost in the background resume); :class:`_Refused`
        with the answer to give otherwise."""
        try:
            decisions = _decisions(await request.json())
        except (ValueError, TypeError) as exc:
            raise _Refused(_error(400, f"bad decisions: {exc}")) from None
        try:
            checkpoint = await self._read(lambda: self.store.load(run_id))
            apply_decisions(ResumeHandle.of(copy.deepcopy(checkpoint.state)), decisions)
        except UnknownRunError as exc:
            raise _Refused(_error(404, str(exc))) from None
        except ResumeError as exc:
            raise _Refused(_refusal(checkpoint, decisions, exc)) from None
        return decisions

    def _is_resuming(self, run_id: str) -> bool:
        return any(task.get_name() == run_id for task in self._resuming)

    async def _failing(self, run_id: str, work: Awaitable[object]) -> None:
        """Await ``work``, which continues ``run_id``; an error it raises is kept to be shown
        on the run's page."""
        try:
            await work
        except CheckpointConflictError as exc:  # another process resumed it first: not a failure
            _log.info("run %s was resumed elsewhere first: %s", run_id, exc)
        except Exception as exc:  # shown on the run's page while the run stays where it is
            why = f"{type(exc).__name__}: {exc}"
            version: int | None
            try:
                version = (await self._read(lambda: self.store.load(run_id))).version
            except Exception:  # the store cannot say where the run is: shown at any version
                version = None
            self.failures[run_id] = (version, why)


def _refusal(
    latest: Checkpoint, decisions: Mapping[str, HumanDecision], exc: Exception
) -> Response:
    """The 409 of an answer the run refused (``exc``): when the run's latest checkpoint holds a
    decision or a result for the calls it answered, the answer lost the race, and is told what
    was decided and where the run is now."""
    found = decided(latest.state, decisions)
    if not found:
        return _error(409, str(exc))
    said = "; ".join(f"call {call_id}: {what}" for call_id, what in found.items())
    message = (
        f"run {latest.run_id!r} was already decided elsewhere (another inspector or worker "
        f"answered first), and this answer was not taken: {said}; "
        f"it is now {latest.state.state.value}. Reload the page to see it."
    )
    return JSONResponse(
        {"error": redact(message), "decided": found, "state": latest.state.state.value},
        status_code=409,
    )


class _Refused(Exception):
    """An answer refused before anything ran, with the response that says why."""

    def __init__(self, response: Response) -> None:
        super().__init__(response.status_code)
        self.response = response


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
