"""The table of ``tool_eval.py``'s results, written into ``docs/tool-eval.md``.

``python benchmarks/tool_eval_report.py`` reads every ``benchmarks/results/tool_eval-*.jsonl``
and rewrites the block between the page's ``tool-eval`` markers; ``--check`` only says whether
the page's block is what the results make (``tests/test_tool_eval.py`` asserts it).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
PAGE = ROOT / "docs" / "tool-eval.md"
BEGIN = "<!-- tool-eval:begin (made by benchmarks/tool_eval_report.py; do not edit) -->"
END = "<!-- tool-eval:end -->"
CONFIGS = ("plain", "done", "verifier", "phases", "all")
SPLITS = (("dev", "development"), ("held_out", "held-out"))
Z95 = 1.959964


def wilson(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of ``successes`` in ``n`` trials (95 % by default)."""
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def complete_lines(path: Path) -> list[str]:
    """The file's non-empty lines that end with a newline: a line being written is left out."""
    *complete, _partial = path.read_text(encoding="utf-8").split("\n")
    return [line for line in complete if line.strip()]


def load(path: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The meta records and the runs of a results file (a run recorded twice counts once)."""
    metas: list[dict[str, Any]] = []
    runs: dict[tuple[str, str, str, int], dict[str, Any]] = {}
    for line in complete_lines(path):
        record = json.loads(line)
        if record["kind"] == "meta":
            metas.append(record)
        else:
            key = (record["model_sha256"], record["task"], record["config"], record["seed"])
            runs.setdefault(key, record)
    return metas, list(runs.values())


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _row(config: str, split: str, runs: Sequence[dict[str, Any]]) -> str:
    n = len(runs)
    wins = sum(r["success"] for r in runs)
    low, high = wilson(wins, n)
    calls = [r["model_calls"] for r in runs]
    tools = [r["tool_executions"] for r in runs]
    turns = sum(r["call_turns"] for r in runs)
    recovered = sum(r["recovered_turns"] for r in runs)
    stops = Counter(r["stop_reason"] for r in runs)
    stop_text = ", ".join(f"{k} {v}" for k, v in sorted(stops.items(), key=lambda i: -i[1]))
    bound_calls = max(r["bound_model_calls"] for r in runs)
    bound_tools = max(r["bound_tool_executions"] for r in runs)
    share = f"{recovered}/{turns}" if turns else "–"
    return (
        f"| {config} | {split} | {wins}/{n} ({wins / n:.0%}) | {low:.0%}–{high:.0%} "
        f"| {_mean(calls):.1f} / {max(calls)} / {bound_calls} "
        f"| {_mean(tools):.1f} / {max(tools)} / {bound_tools} "
        f"| {_mean([r['input_tokens'] for r in runs]):.0f} / "
        f"{_mean([r['output_tokens'] for r in runs]):.0f} "
        f"| {_mean([r['wall_s'] for r in runs]):.0f} | {stop_text} | {share} |"
    )


def model_table(metas: Sequence[dict[str, Any]], runs: Sequence[dict[str, Any]]) -> list[str]:
    """The section of one model: what was run, on what, then one row per configuration and
    half."""
    first = metas[0]
    dates = sorted(m["date"][:10] for m in metas)
    over = sum(not r["within_bound"] for r in runs)
    tasks = len({r["task"] for r in runs})
    seeds = sorted({r["seed"] for r in runs})
    packages = sorted({p for m in metas if (p := m.get("server_package"))})
    lines = [
        f"### {first['model_file'] or first['model']}",
        "",
        f"- model file sha256: `{first['model_sha256']}`",
        f"- server: llama.cpp `{first['server_version']}`"
        + "".join(f" from `{p}`" for p in packages)
        + "; chat template: the model's own "
        f"(sha256 `{first['chat_template_sha256'][:16]}…`)",
        f"- {len(runs)} runs: {tasks} tasks, seeds {', '.join(map(str, seeds))} (temperature 0), "
        f"run {dates[0]}" + (f" to {dates[-1]}" if dates[-1] != dates[0] else ""),
        f"- runs above their proven bound: {over}",
        "",
        "| configuration | half | success | 95 % CI (Wilson) | model calls mean / max / bound "
        "| tool executions mean / max / bound | tokens in / out (mean) | wall s (mean) "
        "| stop reasons | turns with a call read from text |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for config in CONFIGS:
        for split, label in SPLITS:
            chosen = [r for r in runs if r["config"] == config and r["split"] == split]
            if chosen:
                lines.append(_row(config, label, chosen))
    both = []
    for config in CONFIGS:
        chosen = [r for r in runs if r["config"] == config]
        if chosen:
            wins = sum(r["success"] for r in chosen)
            low, high = wilson(wins, len(chosen))
            both.append(f"{config} {wins}/{len(chosen)} ({low:.0%}–{high:.0%})")
    lines += ["", f"Both halves together: {'; '.join(both)}.", "", *_by_kind(runs)]
    return lines


def _by_kind(runs: Sequence[dict[str, Any]]) -> list[str]:
    """Successes per kind of task (both halves) and configuration."""
    configs = [c for c in CONFIGS if any(r["config"] == c for r in runs)]
    kinds = list(dict.fromkeys(r["task_kind"] for r in runs))
    lines = [
        "| kind of task | " + " | ".join(configs) + " |",
        "|---|" + "---|" * len(configs),
    ]
    for kind in kinds:
        cells = []
        for config in configs:
            chosen = [r for r in runs if r["task_kind"] == kind and r["config"] == config]
            cells.append(f"{sum(r['success'] for r in chosen)}/{len(chosen)}" if chosen else "–")
        lines.append(f"| {kind.replace('_', ' ')} | " + " | ".join(cells) + " |")
    return lines


def block(paths: Iterable[Path]) -> str:
    """The generated block of the page, from the results files."""
    lines = [BEGIN, ""]
    for path in sorted(paths):
        metas, runs = load(path)
        if runs:
            lines += [*model_table(metas, runs), ""]
    lines.append(END)
    return "\n".join(lines)


def page_with(page: str, new_block: str) -> str:
    """``page`` with its generated block replaced by ``new_block``."""
    head, _, rest = page.partition(BEGIN)
    _, _, tail = rest.partition(END)
    return head + new_block + tail


def main(argv: Sequence[str] | None = None) -> int:
    """Rewrite the page's block (or, with ``--check``, report whether it is current)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--results", type=Path, default=RESULTS, help="the results folder")
    args = parser.parse_args(argv)
    page = PAGE.read_text(encoding="utf-8")
    wanted = page_with(page, block(args.results.glob("tool_eval-*.jsonl")))
    if args.check:
        if wanted != page:
            print("docs/tool-eval.md is not what the results make: run tool_eval_report.py")
            return 1
        return 0
    PAGE.write_text(wanted, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
