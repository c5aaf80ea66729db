"""Every user error of the command line is one line on stderr and exit code 2, found before any
work starts, and never a traceback, a function's name or a password."""

from __future__ import annotations

import argparse
import math
import socket
import sys
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path

import pytest

from fsm_agent.cli import main
from fsm_agent.cli.args import (
    UsageError,
    existing_store,
    finite_positive_float,
    mask_url,
    nonnegative_int,
    positive_int,
    read_policy,
    writable_file,
)
from fsm_agent.errors import FsmAgentError


def cli(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, cwd: Path, *args: str
) -> tuple[int, str, str]:
    """Run ``fsm-agent ARGS`` in ``cwd`` in this process: the exit code, stdout and stderr."""
    monkeypatch.chdir(cwd)
    monkeypatch.delenv("FSM_AGENT_MODEL", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    try:
        code = main(list(args))
    except SystemExit as exc:  # argparse's own errors, --help and --version
        code = exc.code if isinstance(exc.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, err


def usage_error(result: tuple[int, str, str]) -> str:
    """The one stderr line of a usage error (exit code 2); fails on anything else."""
    code, _, err = result
    assert code == 2, err
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


@pytest.fixture
def demo_recording(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> Path:
    """A recording of the demo run (its policy: max_steps=8, max_retries=2, a verifier)."""
    code, _, err = cli(capsys, monkeypatch, tmp_path, "demo", "--no-diagram", "--record", "r.jsonl")
    assert code == 0, err
    return tmp_path / "r.jsonl"


# --- the policy file, read one way by every command ---------------------------------------


@pytest.mark.parametrize(
    "command",
    [["diagram"], ["run", "hello", "--model", "openai:m"], ["replay", "r.jsonl"]],
    ids=["diagram", "run", "replay"],
)
def test_malformed_policy_json_is_one_line(
    command: list[str],
    demo_recording: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A --policy file that is not JSON is one line naming the file, exit 2, for each command."""
    (demo_recording.parent / "bad.json").write_text('{"max_steps": ', encoding="utf-8")
    result = cli(capsys, monkeypatch, demo_recording.parent, *command, "--policy", "bad.json")
    line = usage_error(result)
    assert "bad.json: not a valid policy: Invalid JSON" in line


def test_read_policy_names_every_bad_field_on_one_line(tmp_path: Path) -> None:
    """A policy that does not validate is a UsageError naming the file and each bad field."""
    path = tmp_path / "p.json"
    path.write_text('{"max_steps": "many", "max_wall_clock_s": "x"}', encoding="utf-8")
    with pytest.raises(UsageError) as caught:
        read_policy(path)
    message = str(caught.value)
    assert message.startswith(str(path)) and "\n" not in message
    assert "max_steps" in message and "max_wall_clock_s" in message
    assert issubclass(UsageError, FsmAgentError)


@pytest.mark.parametrize(
    "command",
    [["diagram", "--trace"], ["replay"], ["diagram", "--policy"]],
    ids=["diagram --trace", "replay", "diagram --policy"],
)
def test_an_input_that_is_not_text_is_one_line(
    command: list[str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A binary file given as a trace, a recording or a policy is one line, exit 2."""
    (tmp_path / "binary.jsonl").write_bytes(b"\xff\xfe\x00garbage")
    line = usage_error(cli(capsys, monkeypatch, tmp_path, *command, "binary.jsonl"))
    assert "binary.jsonl" in line and "UTF-8" in line


# --- outputs checked before the work starts ------------------------------------------------


@pytest.mark.parametrize(
    ("command", "option"),
    [
        (["diagram", "-o"], "-o/--output"),
        (["demo", "--diagram"], "--diagram"),
        (["demo", "--no-diagram", "--record"], "--record"),
        (["run", "hello", "--model", "openai:m", "--record"], "--record"),
    ],
    ids=["diagram -o", "demo --diagram", "demo --record", "run --record"],
)
def test_an_unwritable_output_is_refused_before_the_run(
    command: list[str],
    option: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An output path in a missing directory is one line naming the option, exit 2, and the
    command does no work (no trace printed)."""
    result = cli(capsys, monkeypatch, tmp_path, *command, "missing/out.svg")
    line = usage_error(result)
    assert option in line and "missing" in line
    assert result[1] == ""


def test_writable_file_refuses_a_directory_and_an_empty_path(tmp_path: Path) -> None:
    """A directory and an empty path are refused; a new file in an existing directory is fine."""
    assert writable_file(str(tmp_path / "new.svg")) == str(tmp_path / "new.svg")
    with pytest.raises(argparse.ArgumentTypeError, match="is a directory"):
        writable_file(str(tmp_path))
    with pytest.raises(argparse.ArgumentTypeError, match="empty"):
        writable_file("")


def test_a_format_that_contradicts_the_suffix_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``diagram --format png -o x.svg`` is a usage error and writes nothing."""
    line = usage_error(
        cli(capsys, monkeypatch, tmp_path, "diagram", "--format", "png", "-o", "x.svg")
    )
    assert "--format png" in line and "x.svg" in line
    assert not (tmp_path / "x.svg").exists()


# --- run, runs -------------------------------------------------------------------------------


@pytest.mark.parametrize("prompt", ["", "   "])
def test_run_with_an_empty_prompt_is_a_usage_error(
    prompt: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``run ""`` is one line, exit 2 (not a failed run, exit 1)."""
    line = usage_error(cli(capsys, monkeypatch, tmp_path, "run", prompt, "--model", "openai:m"))
    assert "prompt" in line and "empty" in line


def test_runs_with_an_unknown_store_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``runs --db mysql://x`` is one line, exit 2, with the URL's password masked."""
    line = usage_error(
        cli(capsys, monkeypatch, tmp_path, "runs", "list", "--db", "mysql://u:pw9@x")
    )
    assert "unknown store" in line and "pw9" not in line


def test_runs_never_creates_a_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``runs --db nope.db`` (and ``sqlite:///nope.db``, ``diagram --trace``) is a usage error
    and leaves no empty database behind."""
    for command in (
        ["runs", "list", "--db", "nope.db"],
        ["runs", "show", "r", "--db", "sqlite:///nope.db"],
        ["diagram", "--trace", "sqlite:///nope.db#r"],
    ):
        line = usage_error(cli(capsys, monkeypatch, tmp_path, *command))
        assert "no SQLite store at 'nope.db'" in line
    assert not (tmp_path / "nope.db").exists()


@pytest.mark.parametrize(
    "command",
    [["runs", "list", "--db"], ["diagram", "--trace"]],
    ids=["runs", "diagram --trace"],
)
def test_a_database_password_never_shows_in_a_connection_error(
    command: list[str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A PostgreSQL URL that cannot connect is one line, exit 2, with its password masked even
    where the driver's message spans lines."""
    url = "postgresql://someone:s3cr3t-pw@127.0.0.1:1/db"
    target = url if command[0] == "runs" else f"{url}#run_1"
    line = usage_error(cli(capsys, monkeypatch, tmp_path, *command, target))
    assert "s3cr3t-pw" not in line
    assert "someone:***@127.0.0.1:1/db" in line


def test_mask_url_hides_the_password_in_the_url_and_in_any_text() -> None:
    """mask_url masks the password wherever the text repeats it; URLs without one are kept."""
    url = "postgresql://me:p%40ss@db.example:5432/app"
    assert mask_url(url) == "postgresql://me:***@db.example:5432/app"
    assert mask_url(url, "failed for p%40ss at host") == "failed for *** at host"
    for plain in ("postgresql://me@db/app", "runs.db", "sqlite:///x.db"):
        assert mask_url(plain) == plain


# --- argument types: a sentence, never a function's name -------------------------------------


@pytest.mark.parametrize(
    ("kind", "text"),
    [
        (positive_int, "0"),
        (positive_int, "x"),
        (nonnegative_int, "-1"),
        (finite_positive_float, "-1"),
        (finite_positive_float, "0"),
        (finite_positive_float, "nan"),
        (finite_positive_float, "inf"),
        (finite_positive_float, "soon"),
        (existing_store, "mysql://x"),
    ],
)
def test_argument_types_refuse_with_a_sentence(
    kind: Callable[[str], object], text: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each shared argument type refuses bad text with ArgumentTypeError, whose message argparse
    prints as is (a ValueError would make argparse print the function's name)."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(argparse.ArgumentTypeError) as caught:
        kind(text)
    assert kind.__name__ not in str(caught.value)


def test_argument_types_accept_good_values() -> None:
    """Good values come back converted."""
    assert positive_int("3") == 3 and nonnegative_int("0") == 0
    assert math.isclose(finite_positive_float("2.5"), 2.5)
    assert existing_store("postgresql://u@h/db") == "postgresql://u@h/db"


def test_a_bad_number_names_no_function(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``runs show r --last soon`` is one line that names the option and no function."""
    (tmp_path / "runs.db").touch()
    line = usage_error(
        cli(capsys, monkeypatch, tmp_path, "runs", "show", "r", "--db", "runs.db", "--last", "soon")
    )
    assert "argument --last: expected a whole number, not 'soon'" in line
    assert "_int" not in line and "invalid" not in line


@pytest.mark.parametrize(
    ("command", "option"),
    [
        (["check", "--max-states", "lots"], "--max-states"),
        (["fuzz", "--examples", "lots"], "--examples"),
        (["fuzz", "--seed", "lots"], "--seed"),
    ],
)
def test_no_command_names_a_function_in_an_argument_error(
    command: list[str],
    option: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Whatever type function a command gives argparse, a bad value reads "argument X: expected
    …, not 'lots'", never "invalid _positive_int value"."""
    line = usage_error(cli(capsys, monkeypatch, tmp_path, *command))
    assert f"argument {option}: expected " in line and "not 'lots'" in line
    assert "invalid" not in line and "_int" not in line


# --- what the commands draw and say -----------------------------------------------------------


def test_diagram_of_a_recording_uses_the_recorded_policy(
    demo_recording: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``diagram --trace`` on a recording fills the guards with the recorded run's policy (the
    demo's 8 steps, its verifier), not the default's; an explicit --policy still wins."""
    code, out, err = cli(
        capsys,
        monkeypatch,
        demo_recording.parent,
        "diagram",
        "--level",
        "full",
        "--trace",
        "r.jsonl",
        "--format",
        "mermaid",
    )
    assert code == 0, err
    assert "steps < 8" in out and "steps < 200" not in out
    assert "class verifying unreachable" not in out
    (demo_recording.parent / "p.json").write_text('{"max_steps": 50}', encoding="utf-8")
    code, out, err = cli(
        capsys,
        monkeypatch,
        demo_recording.parent,
        *("diagram", "--level", "full", "--trace", "r.jsonl", "--format", "mermaid"),
        *("--policy", "p.json"),
    )
    assert code == 0, err
    assert "steps < 50" in out


def test_version_is_the_installed_version(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``fsm-agent --version`` prints the installed distribution's version, exit 0."""
    import fsm_agent

    code, out, _ = cli(capsys, monkeypatch, tmp_path, "--version")
    assert code == 0
    assert out.strip() == f"fsm-agent {version('fsm_agent')}"
    assert fsm_agent.__version__ == version("fsm_agent")


def test_a_missing_extra_exits_1_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``runs --db postgresql://…`` without psycopg is one line naming the extra, exit 1."""
    monkeypatch.setitem(sys.modules, "psycopg", None)  # import psycopg → ImportError
    code, _, err = cli(
        capsys, monkeypatch, tmp_path, "runs", "list", "--db", "postgresql://u:pw7@127.0.0.1/x"
    )
    assert code == 1
    assert len(err.splitlines()) == 1
    assert "pip install -e '.[postgres]'" in err and "pw7" not in err


@pytest.mark.parametrize("seconds", ["0", "-1", "nan", "inf"])
def test_fuzz_refuses_a_time_limit_that_is_not_a_positive_number(
    seconds: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``fuzz --max-seconds 0`` used to run no example and report OK; any limit that is not a
    finite number of seconds above 0 is a usage error naming the option."""
    line = usage_error(cli(capsys, monkeypatch, tmp_path, "fuzz", "--max-seconds", seconds))
    assert "argument --max-seconds: must be a finite number greater than 0" in line


def test_fuzz_with_a_time_limit_shorter_than_an_example_is_no_result(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A limit that runs out before the first example ends is kept: the session ends there,
    and an OK never stands on zero examples (NO RESULT, exit 1)."""
    code, out, err = cli(
        capsys, monkeypatch, tmp_path, "fuzz", "--max-seconds", "1e-9", "--seed", "1"
    )
    assert code == 1, err
    assert "fuzz: NO RESULT" in out and "examples run:         0 in" in out
    assert "no example finished within the time limit" in out


def test_fuzz_max_seconds_alone_runs_until_the_time_is_spent() -> None:
    """``fuzz --max-seconds 600`` (docs/testing.md's ten-minute run) used to stop at the dev
    profile's 300 examples after a few seconds; alone it is the session's length, and
    ``--examples`` still bounds it when given."""
    from fsm_agent.cli.fuzz import session_examples
    from fsm_agent.fuzzing import PROFILES

    dev = PROFILES["dev"]
    assert session_examples(None, 600.0, dev) == PROFILES["fuzz"].examples
    assert session_examples(50, 600.0, dev) == 50
    assert session_examples(None, None, dev) == dev.examples


def test_fuzz_an_unimportable_target_is_one_error_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``fuzz nomod:f`` says ``error:`` like every other command's usage error."""
    line = usage_error(cli(capsys, monkeypatch, tmp_path, "fuzz", "no_such_module_x:f"))
    assert line.startswith("fsm-agent fuzz: error: cannot import 'no_such_module_x'"), line


def test_an_unknown_option_points_to_its_command_s_help(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``fuzz --agent x`` is the fuzz command's error, pointing to ``fsm-agent fuzz --help``."""
    line = usage_error(cli(capsys, monkeypatch, tmp_path, "fuzz", "--agent", "x"))
    assert line == (
        "fsm-agent fuzz: error: unrecognized arguments: --agent (see 'fsm-agent fuzz --help')"
    )


def test_a_refused_connection_is_retried_briefly_and_reported_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``fsm-agent run`` against a port nobody listens on: two retries (not five, about 30 s),
    then the error once, exit 1."""
    with socket.socket() as probe:  # a port that was free a moment ago: nobody listens on it
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    code, out, err = cli(
        capsys,
        monkeypatch,
        tmp_path,
        "run",
        "hi",
        "--model",
        "openai:gpt-4o-mini",
        "--base-url",
        f"http://127.0.0.1:{port}/v1",
    )
    assert code == 1, err
    everything = out + err
    assert everything.count("All connection attempts failed (") == 1, everything
    assert "retry 2 after" in out and "retry 3 after" not in out
