"""Building an agent checks the code handed to it: a verifier or stop condition that cannot be
called the way the kernel calls it, or ``tools`` that is not a list, is refused at once with a
ConfigurationError that says what to write instead."""

from __future__ import annotations

from typing import Any

import pytest

from fsm_agent import (
    Agent,
    ConfigurationError,
    HookError,
    Policy,
    RunState,
    StopReason,
    ToolDefinitionError,
    Verdict,
    tool,
)
from fsm_agent.testing import ScriptedModel, text
from helpers import add


def _agent(**options: Any) -> Agent[Any, Any]:
    return Agent(ScriptedModel([text("ok")]), **options)


def test_a_single_tool_instead_of_a_list_is_refused() -> None:
    """``tools=add`` names the fix, ``tools=[add]``, for a function or a built tool."""

    def multiply(a: int, b: int) -> int:
        """Multiply two integers."""
        return a * b

    with pytest.raises(ConfigurationError, match=r"tools=\[multiply\]; got multiply itself"):
        _agent(tools=multiply)
    with pytest.raises(ConfigurationError, match=r"must be a list of tools, e.g. tools=\[add\]"):
        _agent(tools=add)
    with pytest.raises(ConfigurationError, match="tools must be a list of tools"):
        _agent(tools=3)


def test_a_verifier_with_the_wrong_signature_is_refused() -> None:
    """A verifier taking a positional answer is refused before any run spends its budget."""

    def positional(answer: str) -> bool:
        return bool(answer)

    with pytest.raises(ConfigurationError) as caught:
        _agent(verifier=positional)
    message = str(caught.value)
    assert message.startswith("verifier positional cannot be called as verifier(output=")
    assert "write def verify(*, output: str, run_state: RunState)" in message


def test_a_stop_condition_with_the_wrong_signature_is_refused() -> None:
    """A stop condition that takes no argument is refused when the agent is built."""

    def never() -> bool:
        return False

    with pytest.raises(ConfigurationError, match=r"def should_stop\(run_state: RunState\)"):
        _agent(stop_conditions=[never])


def test_callables_the_kernel_can_call_are_accepted() -> None:
    """Keyword-only, **kwargs, async and callable-object verifiers and stop conditions pass."""

    def keyword(*, output: str, run_state: RunState) -> Verdict:
        return Verdict.accept()

    async def loose(**kwargs: object) -> bool:
        return True

    class Judge:
        def __call__(self, *, output: str, **context: object) -> bool:
            return True

    class Limit:
        def __call__(self, run_state: RunState, *extra: object) -> bool:
            return run_state.model_calls > 5

    for verifier in (keyword, loose, Judge()):
        result = _agent(verifier=verifier, stop_conditions=[Limit()]).run_sync("hi")
        assert result.stop_reason in (StopReason.COMPLETED, StopReason.STOP_CONDITION)


def test_a_tool_without_a_description_is_refused_with_the_fix() -> None:
    """A tool with no docstring would reach the model with an empty description: it is refused,
    naming the two fixes; ``description=""`` still sends none on purpose."""

    def lookup(key: str) -> str:
        return key

    with pytest.raises(ToolDefinitionError, match=r"'lookup' has no description.*docstring"):
        tool(lookup)
    assert tool(description="")(lookup).description == ""
    assert tool(description="Look a key up.")(lookup).description == "Look a key up."


@pytest.mark.parametrize(
    "verifier",
    [
        pytest.param(lambda *, output, run_state: 1 / 0, id="raises"),
        pytest.param(lambda *, output, run_state: None, id="returns-none"),
    ],
)
def test_a_failing_verifier_lands_on_the_result_error(verifier: Any) -> None:
    """A verifier that raises or returns garbage spends the verification budget like a
    rejection, and the run that ends unverified says why on ``RunResult.error``."""
    agent = Agent(
        ScriptedModel([text("first"), text("second")]),
        verifier=verifier,
        policy=Policy(max_verifications=1),
    )
    result = agent.run_sync("go")
    assert result.stop_reason is StopReason.UNVERIFIED
    assert isinstance(result.error, HookError) and result.error.hook == "verifier"
    assert "could not be verified" not in str(result.error)
    assert result.run_state is not None and result.run_state.error == str(result.error)


def test_a_verifier_that_recovers_leaves_no_error() -> None:
    """An earlier verifier failure does not outlive a later verdict."""
    calls: list[str] = []

    def flaky(*, output: str, run_state: RunState) -> bool:
        calls.append(output)
        if len(calls) == 1:
            raise RuntimeError("flaky")
        return False

    agent = Agent(
        ScriptedModel([text("first"), text("second"), text("third")]),
        verifier=flaky,
        policy=Policy(max_verifications=1),
    )
    result = agent.run_sync("go")
    assert result.stop_reason is StopReason.UNVERIFIED and calls == ["first", "second"]
    assert result.error is None
