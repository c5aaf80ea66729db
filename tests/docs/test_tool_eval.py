"""The tool-use evaluation (``benchmarks/tool_eval.py``): the suite is honest, a success needs an
answered ending, the runner resumes without running a finished run twice, and the docs table is
what the committed results make. Runs are scripted (``fsm_agent.testing``); nothing is timed."""

from __future__ import annotations

import asyncio
import json
import sys
from collections import Counter
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import tool_eval_report
from tool_eval import Config, Server, evaluate
from tool_tasks import FACTS, TASKS, Kind, Ledger, Split, answer_matches

from fsm_agent.testing import ScriptedModel, text, tool_call

SERVER = Server("http://127.0.0.1:1/v1", "scripted", "m.gguf", "ab" * 32, "b1-test", "{{x}}")
DOOR = next(t for t in TASKS if t.id == "dev-01")  # the Quarnel lab's door code


def test_the_suite_has_two_halves_of_the_same_kinds_and_answers_no_prompt_gives_away() -> None:
    """At least 30 tasks, 16 per half with the same kinds in each; no answer appears in any
    prompt, and every looked-up answer lives only behind the lookup tool."""
    assert len(TASKS) >= 30 and len({t.id for t in TASKS}) == len(TASKS)
    kinds = {s: Counter(t.kind for t in TASKS if t.split is s) for s in Split}
    assert kinds[Split.DEV] == kinds[Split.HELD_OUT] and sum(kinds[Split.DEV].values()) == 16
    for task in TASKS:
        assert task.answer.casefold() not in " ".join(t.prompt for t in TASKS).casefold()
        if task.kind in (Kind.LOOKUP, Kind.TWO_STEP):
            assert any(task.answer in fact for fact in FACTS.values()), task.id


def test_an_answer_is_matched_exactly_and_an_order_task_needs_one_order() -> None:
    """Grouped digits read as one number, a longer number does not match, and an order task
    with two orders placed fails even with the right number."""
    product = next(t for t in TASKS if t.id == "dev-05")  # 48213 × 917
    assert answer_matches(product, "It is 44,211,321.", Ledger())
    assert not answer_matches(product, "It is 442113210.", Ledger())
    order = next(t for t in TASKS if t.kind is Kind.STOP)
    assert answer_matches(order, f"Your order is {order.answer}.", Ledger(orders=["x"]))
    assert not answer_matches(order, f"Your order is {order.answer}.", Ledger(orders=["x", "y"]))


def test_wilson_interval_matches_the_formula() -> None:
    """8 of 16 gives 28 %–72 %; 0 of 16 starts at 0 and 16 of 16 ends at 1."""
    low, high = tool_eval_report.wilson(8, 16)
    assert (round(low, 3), round(high, 3)) == (0.28, 0.72)
    assert (
        tool_eval_report.wilson(0, 16)[0] == 0.0
        and round(tool_eval_report.wilson(0, 16)[1], 3) == 0.194
    )
    assert tool_eval_report.wilson(16, 16)[1] == 1.0


def _records(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_runs_are_recorded_once_each_and_a_second_start_skips_them(tmp_path: Path) -> None:
    """Each (task, configuration, seed) run appends one line with its bound; started again on
    the same file, the runner makes no model call and appends only its meta line."""
    results = tmp_path / "results.jsonl"
    script = [
        tool_call("lookup", {"name": "Quarnel lab"}),
        text("The door code is 7319."),
        tool_call("lookup", {"name": "Quarnel lab"}),
        tool_call("done", {"message": "The door code is 7319."}),
    ]
    model = ScriptedModel(script)
    over = asyncio.run(evaluate(model, SERVER, results, [DOOR], [Config.PLAIN, Config.DONE], [0]))
    assert over == 0
    meta, plain, done = _records(results)
    assert meta["kind"] == "meta" and meta["model_sha256"] == SERVER.model_sha256
    assert meta["chat_template"] == "{{x}}" and meta["seeds"] == [0]
    assert (plain["config"], plain["success"], plain["stop_reason"]) == ("plain", True, "completed")
    assert (done["config"], done["success"], done["stop_reason"]) == ("done", True, "done_tool")
    for run in (plain, done):
        assert run["within_bound"] and run["model_calls"] <= run["bound_model_calls"]
        assert run["model_sha256"] == SERVER.model_sha256
    again = ScriptedModel([])
    asyncio.run(evaluate(again, SERVER, results, [DOOR], [Config.PLAIN, Config.DONE], [0]))
    assert {r.seed for r in model.requests} == {0}
    assert again.requests == [] and [r["kind"] for r in _records(results)] == [
        "meta",
        "run",
        "run",
        "meta",
    ]


def test_a_line_cut_off_by_a_killed_run_is_dropped_and_that_run_made_again(
    tmp_path: Path,
) -> None:
    """A results file ending in half a line (the runner was killed while writing) resumes: the
    finished run is skipped, the cut one is run again, and every line of the file is JSON."""
    results = tmp_path / "results.jsonl"
    finish = [tool_call("lookup", {"name": "Quarnel lab"}), text("It is 7319.")]
    asyncio.run(evaluate(ScriptedModel(finish), SERVER, results, [DOOR], [Config.PLAIN], [0]))
    with results.open("a") as sink:
        sink.write('{"kind": "run", "task": "dev-01", "config": "verif')
    model = ScriptedModel(finish)
    asyncio.run(evaluate(model, SERVER, results, [DOOR], [Config.PLAIN, Config.VERIFIER], [0]))
    runs = [r for r in _records(results) if r["kind"] == "run"]
    assert [(r["config"], r["success"]) for r in runs] == [("plain", True), ("verifier", True)]
    assert len(model.requests) == 2  # only the verifier run was made


def test_the_right_text_in_an_unverified_ending_is_not_a_success(tmp_path: Path) -> None:
    """The model answers the right number without calling a tool: the verifier rejects it
    until the run ends unverified, which the evaluation counts as a failure."""
    results = tmp_path / "results.jsonl"
    model = ScriptedModel([text("The door code is 7319.")] * 3)
    asyncio.run(evaluate(model, SERVER, results, [DOOR], [Config.VERIFIER], [7]))
    assert {r.seed for r in model.requests} == {7}  # the run's seed goes to the server
    run = _records(results)[-1]
    assert (run["stop_reason"], run["right_answer"], run["success"]) == ("unverified", True, False)


@pytest.mark.parametrize("config", list(Config))
def test_every_configuration_builds_and_states_a_finite_bound(config: Config) -> None:
    """Each configuration's agent has a finite proven bound on model calls and tool runs."""
    from tool_eval import build_agent

    bounds = build_agent(ScriptedModel([]), config, Ledger()).bounds()
    assert bounds.max_model_calls is not None and bounds.max_tool_executions is not None


def test_the_docs_table_is_what_the_committed_results_make() -> None:
    """docs/tool-eval.md's generated block equals the report rebuilt from
    benchmarks/results/."""
    assert tool_eval_report.main(["--check"]) == 0


def test_the_docs_quote_the_system_prompt_the_program_sends() -> None:
    """The prompt quoted in docs/tool-eval.md is, word for word, the one of the runs."""
    from tool_eval import ANSWER_BY_DONE, ANSWER_BY_TEXT, SYSTEM_PROMPT

    page = (Path(__file__).resolve().parents[2] / "docs" / "tool-eval.md").read_text()
    quoted = " ".join(line[2:] for line in page.splitlines() if line.startswith("> "))
    assert quoted == SYSTEM_PROMPT + ANSWER_BY_TEXT
    assert ANSWER_BY_DONE.removesuffix(".") in " ".join(page.split())


def test_a_run_above_its_proven_bound_fails_the_evaluation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Were a run to make more model calls than ``agent.bounds()`` states (here the stated bound
    is lowered to 1 for a run of 2 calls), its line says so and the evaluation counts it, which
    makes the program exit 1."""
    import dataclasses

    import tool_eval

    built = tool_eval.build_agent

    def lowered(*args: object, **kwargs: object) -> object:
        agent = built(*args, **kwargs)  # type: ignore[arg-type]
        true_bounds = agent.bounds()
        monkeypatch.setattr(
            agent, "bounds", lambda: dataclasses.replace(true_bounds, max_model_calls=1)
        )
        return agent

    monkeypatch.setattr(tool_eval, "build_agent", lowered)
    results = tmp_path / "results.jsonl"
    model = ScriptedModel([tool_call("lookup", {"name": "Quarnel lab"}), text("It is 7319.")])
    assert asyncio.run(evaluate(model, SERVER, results, [DOOR], [Config.PLAIN], [0])) == 1
    run = _records(results)[-1]
    assert (run["model_calls"], run["bound_model_calls"], run["within_bound"]) == (2, 1, False)
