"""A composition drawn: the parent's overview with a box per agent tool inside dispatching,
linked to the child's own overview; a composed run drawn with each child's run inside the
parent's dispatching, linked to the child's own drawing; the checked-in drawings of the writer
example are fresh; the command writes the child's drawing beside the parent's."""

from __future__ import annotations

import runpy
from pathlib import Path
from typing import Any

import pytest

from fsm_agent import diagrams
from fsm_agent.cli import main
from fsm_agent.cli.diagram_agent import agent_drawings

ROOT = Path(__file__).resolve().parents[2]
REGENERATE = (
    "cd examples && fsm-agent diagram --agent writer_researcher:writer "
    "-o ../diagrams/composition.svg (and .mmd)"
)


def writer() -> Any:
    """The example's writer, with the researcher as a tool."""
    return runpy.run_path(str(ROOT / "examples" / "writer_researcher.py"))["writer"]


def test_the_parent_is_drawn_with_a_box_linking_to_the_childs_machine() -> None:
    """The writer's drawing has a box for 'research' inside dispatching, where it is called: at
    most 2 runs of at most 7 model calls each, linked to the researcher's drawing, which is
    drawn beside it."""
    files = agent_drawings(writer(), "out/writer.dot", "dot", "writer")
    assert list(files) == ["out/writer.dot", "out/writer-research.dot"]
    dot = files["out/writer.dot"]
    (box,) = [line for line in dot.splitlines() if 'ID="agent-tool-research"' in line]
    assert box.startswith("  dispatching [") and 'id="state-dispatching"' in box
    assert 'HREF="writer-research.dot"' in box
    assert "≤ 2 runs per run" in box and "≤ 7 model calls each" in box
    child = files["out/writer-research.dot"]
    assert "agent tool 'research'" in child and "agent-tool-" not in child
    mermaid = agent_drawings(writer(), "w.mmd", "mermaid", "writer")["w.mmd"]
    assert "note right of dispatching : agent tool 'research', run in dispatching:" in mermaid
    assert "its machine: w-research.mmd" in mermaid


def test_without_a_file_only_the_parent_is_drawn_and_the_box_links_nowhere() -> None:
    """Drawn to stdout, the children have no file to link to: the box says their bounds only."""
    files = agent_drawings(writer(), None, "dot", "writer")
    assert list(files) == [None]
    assert "URL=" not in files[None] and "≤ 7 model calls each" in files[None]


def test_the_checked_in_composition_drawings_are_fresh() -> None:
    """diagrams/composition*.mmd and .svg are the writer example as drawn now."""
    for suffix in ("mmd", "svg"):
        fmt = "mermaid" if suffix == "mmd" else "svg"
        name = str(ROOT / "diagrams" / f"composition.{suffix}")
        for file_name, source in agent_drawings(writer(), name, fmt, "writer").items():
            assert file_name is not None
            path = Path(file_name)
            if suffix == "svg":
                stamped = diagrams.svg_digest(path.read_bytes())
                assert stamped == diagrams.dot_digest(source), f"{path.name}: {REGENERATE}"
            else:
                assert path.read_text(encoding="utf-8") == source, f"{path.name}: {REGENERATE}"


def test_the_command_writes_the_childs_drawing_beside_the_parents(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``fsm-agent diagram --agent`` writes FILE and FILE's stem-TOOL; other drawing options
    with it are a usage error."""
    monkeypatch.syspath_prepend(str(ROOT / "examples"))
    target = tmp_path / "writer.mmd"
    assert main(["diagram", "--agent", "writer_researcher:writer", "-o", str(target)]) == 0
    assert "agent tool 'research'" in target.read_text(encoding="utf-8")
    assert "stateDiagram-v2" in (tmp_path / "writer-research.mmd").read_text(encoding="utf-8")
    code = main(["diagram", "--agent", "writer_researcher:writer", "--level", "full"])
    assert code == 2 and "--agent draws the agent as it is built" in capsys.readouterr().err


def test_a_composed_run_is_drawn_with_each_childs_path_inside_dispatching(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``fsm-agent diagram --trace STORE#RUN_ID -o FILE`` of a stored writer run draws, inside
    the writer's dispatching, each research call's child run (its path, how it ended, its
    model calls) linked to that child's run drawn beside it as ``STEM-CALL_ID``; a run
    without children is drawn as before."""
    db = tmp_path / "runs.db"
    run_id = stored_writer_run(db)
    target = tmp_path / "run.dot"
    assert main(["diagram", "--trace", f"sqlite:///{db}#{run_id}", "-o", str(target)]) == 0
    drawn = sorted(p.name for p in tmp_path.glob("run*.dot"))
    assert drawn == ["run-call_0_0.dot", "run-call_1_0.dot", "run.dot"]
    (line,) = [x for x in target.read_text(encoding="utf-8").splitlines() if "agent-call-" in x]
    assert line.startswith("  dispatching [")
    for call_id in ("call_0_0", "call_1_0"):
        assert f'ID="agent-call-{call_id}"' in line and f'HREF="run-{call_id}.dot"' in line
    assert "agent tool &#x27;research&#x27;, call call_0_0:" in line
    assert "done: completed, 2 model calls" in line
    child = (tmp_path / "run-call_0_0.dot").read_text(encoding="utf-8")
    assert "ended: completed" in child and "agent-call-" not in child
    assert main(["diagram", "--trace", f"sqlite:///{db}#{run_id}", "--format", "mermaid"]) == 0
    assert "note right of dispatching : agent tool 'research', call call_0_0:" in (
        capsys.readouterr().out
    )


def stored_writer_run(db: Path) -> str:
    """The writer example run to its end over a SQLite store at ``db``; its run id."""
    from fsm_agent import Runtime, SQLiteCheckpointer
    from fsm_agent.testing import ScriptedModel

    example = runpy.run_path(str(ROOT / "examples" / "writer_researcher.py"))
    researcher = example["build_researcher"](ScriptedModel(example["RESEARCHER_SCRIPT"]))
    parent = example["build_writer"](ScriptedModel(example["WRITER_SCRIPT"]), researcher)
    store = SQLiteCheckpointer(db)
    parent.checkpointer = store
    parent.runtime = Runtime(new_id=lambda: "run_writer")
    assert parent.run_sync("Write a short piece on tides.").ok
    store.close()
    return "run_writer"
