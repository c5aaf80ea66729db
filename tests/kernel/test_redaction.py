"""The one redaction: the key shapes operators meet, masked wherever the library shows or keeps
text (a provider's error, the inspector, ``fsm-agent runs show``)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from pydantic import SecretStr

from fsm_agent import Agent
from fsm_agent.cli import main
from fsm_agent.errors import ProviderServerError
from fsm_agent.persistence import SQLiteCheckpointer
from fsm_agent.providers._redact import MASK, scrub_error
from fsm_agent.redaction import REDACTED, redact, redact_data, secret_name
from fsm_agent.testing import ScriptedModel, text

SHAPES = {
    "x-api-key header": ("x-api-key: a1b2c3d4e5f6g7h8", "a1b2c3d4e5f6g7h8"),
    "Stripe": ("sk_live_51HxYzAbCdEf", "sk_live_51HxYzAbCdEf"),
    "GitHub": (
        "ghp_16C7e42F292c6912E7710c838347Ae178B4a",
        "ghp_16C7e42F292c6912E7710c838347Ae178B4a",
    ),
    "Slack": ("xoxb-1234-5678-AbCdEfGh", "xoxb-1234-5678-AbCdEfGh"),
    "AWS": ("AKIAIOSFODNN7EXAMPLE", "AKIAIOSFODNN7EXAMPLE"),
    "api_key in JSON": ('{"api_key": "hunter2hunter2"}', "hunter2hunter2"),
    "short sk-": ("sk-ab12", "sk-ab12"),
    "OpenAI project": ("sk-proj-" + "x" * 40, "sk-proj-" + "x" * 40),
    "bearer": ("Authorization: Bearer abc.def.ghi123", "abc.def.ghi123"),
    "URL password": ("postgresql://me:hunter22@db/x", "hunter22"),
    "token in JSON": ('{"token": "plain-tok-value-7"}', "plain-tok-value-7"),
    "camelCase secret in JSON": ('{"authToken": "plain-value-8"}', "plain-value-8"),
    "secret pair in JSON inside a string": (
        '{"arguments": "{\\"session_token\\": \\"plain-value-9\\"}"}',
        "plain-value-9",
    ),
    "numeric password in a repr": ("{'user': 'me', 'passwd': 61616161}", "61616161"),
}


@pytest.mark.parametrize(("line", "secret"), SHAPES.values(), ids=SHAPES.keys())
def test_every_key_shape_is_masked(line: str, secret: str) -> None:
    """Each shape is masked inside a sentence, and the text around it is kept."""
    shown = redact(f"the server said: {line} (retry)", [])
    assert secret not in shown and REDACTED in shown
    assert shown.startswith("the server said: ") and shown.endswith(" (retry)")


@pytest.mark.parametrize(
    "plain",
    [
        "sk-learn",
        "max_tokens: 100",
        "the task-key is 'done'",
        "AKIA is a prefix",
        '{"max_tokens": 100, "key": "user:42", "author": "Ann Lee"}',
    ],
)
def test_ordinary_text_is_left_alone(plain: str) -> None:
    """Words that merely resemble a key shape are not masked."""
    assert redact(plain, []) == plain


@pytest.mark.parametrize(("line", "secret"), SHAPES.values(), ids=SHAPES.keys())
def test_provider_errors_mask_the_same_shapes(line: str, secret: str) -> None:
    """A provider's error quoting a key that is not its own is masked too: one redaction."""
    error = scrub_error(
        ProviderServerError(f"500: {line}", status_code=500, body=f'{{"echo": "{line}"}}'),
        SecretStr("sk-the-providers-own-key-0000"),
    )
    assert secret not in str(error) and secret not in (error.body or "")
    assert MASK in str(error)


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("api_key", True),
        ("x-api-key", True),
        ("APIKey", True),
        ("privateKey", True),
        ("password", True),
        ("db_passwd", True),
        ("token", True),
        ("refresh_token", True),
        ("clientSecret", True),
        ("Authorization", True),
        ("credentials", True),
        ("max_tokens", False),
        ("key", False),
        ("author", False),
        ("city", False),
    ],
)
def test_secret_names_are_told_by_their_words(name: str, secret: bool) -> None:
    """A name is a secret's when one of its words is (``token``) or it names a kind of key."""
    assert secret_name(name) is secret


def test_data_loses_the_whole_value_of_a_secret_named_key() -> None:
    """Each value under a secret's name is masked whole (nested data too); the rest is kept."""
    data = {
        "city": "Oslo",
        "password": "hunter2",
        "auth": {"user": "me", "pin": 6161},
        "items": [{"token": 42, "n": 1}],
        "secret": None,
        "has_token": True,
    }
    assert redact_data(data, []) == {
        "city": "Oslo",
        "password": REDACTED,
        "auth": REDACTED,
        "items": [{"token": REDACTED, "n": 1}],
        "secret": None,
        "has_token": True,
    }


def test_the_inspector_uses_the_one_redaction() -> None:
    """The inspector's ``redact`` is the library's."""
    inspector = pytest.importorskip("fsm_agent.inspector")
    assert inspector.redact is redact and inspector.REDACTED == REDACTED


def test_runs_show_masks_keys_a_run_holds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``fsm-agent runs show`` prints a run's output through the redaction, as the inspector
    shows it: a key the answer quoted, and an environment secret's value, are masked."""
    monkeypatch.setenv("MY_SERVICE_TOKEN", "tok-env-secret-value-42")
    answer = "use x-api-key: a1b2c3d4e5f6g7h8 and ghp_16C7e42F292c6912E7710c838347Ae178B4a "
    answer += 'or tok-env-secret-value-42 or {"token": "plain-tok-value-7"}'
    store = SQLiteCheckpointer(tmp_path / "runs.db")
    agent = Agent(ScriptedModel([text(answer)]), checkpointer=store)
    result = asyncio.run(agent.run("Which key?"))
    store.close()
    assert main(["runs", "show", result.run_id, "--db", str(tmp_path / "runs.db")]) == 0
    out = capsys.readouterr().out
    assert "output" in out and REDACTED in out
    for secret in ("a1b2c3d4e5f6g7h8", "ghp_16C7", "tok-env-secret-value-42", "plain-tok-value-7"):
        assert secret not in out
