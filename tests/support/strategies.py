"""Hypothesis strategies for the kernel's property tests: scripts, policies, verifiers."""

from __future__ import annotations

from hypothesis import strategies as st

from fsm_agent import (
    AuthenticationError,
    ContextWindowExceededError,
    FinishReason,
    Policy,
    RateLimitError,
    RetryPolicy,
    Verdict,
)
from fsm_agent.testing import Turn, fail, finish, text, tool_call, tool_calls
from helpers import add, boom

__all__ = ["TOOLS", "policies", "scripts", "verifiers"]


TOOLS = [add, boom]

_names = st.sampled_from(["add", "boom", "missing", "done"])
_args = st.one_of(
    st.fixed_dictionaries({"a": st.integers(-5, 5), "b": st.integers(-5, 5)}),
    st.fixed_dictionaries({"reason": st.text(max_size=5)}),
    st.just({"a": "not a number"}),
    st.sampled_from(['{"a": 1, "b"', "not json", "[1, 2]", ""]),
    st.fixed_dictionaries({"message": st.text(max_size=5)}),
)

turns: st.SearchStrategy[Turn] = st.one_of(
    st.builds(text, st.text(max_size=12)),
    st.builds(tool_call, _names, _args),
    st.lists(st.tuples(_names, _args), min_size=2, max_size=3).map(lambda c: tool_calls(*c)),
    st.builds(
        finish,
        st.sampled_from([*(r.value for r in FinishReason), "weird_reason"]),
        st.text(max_size=6),
    ),
    st.just(fail()),
    st.builds(lambda s: fail(RateLimitError("slow down", retry_after=s)), st.floats(0, 3)),
    st.just(fail(AuthenticationError("bad key", status_code=401))),
    st.just(fail(ContextWindowExceededError("too long", status_code=400))),
)

scripts = st.lists(turns, min_size=0, max_size=14)


@st.composite
def policies(draw: st.DrawFn) -> Policy:
    """Small policies, so that every limit is reached by some generated run."""
    return Policy(
        max_steps=draw(st.integers(1, 6)),
        retry=RetryPolicy(max_retries=draw(st.integers(0, 3)), base_delay_s=0.5, max_delay_s=4),
        max_consecutive_errors=draw(st.integers(1, 3)),
        max_total_errors=draw(st.none() | st.integers(1, 6)),
        max_compaction_attempts=draw(st.integers(0, 2)),
        max_verifications=draw(st.integers(0, 2)),
        require_done_tool=draw(st.booleans()),
        parallel_tool_calls=draw(st.booleans()),
        max_tool_calls=draw(st.none() | st.integers(1, 5)),
        tool_failure_mode=draw(st.sampled_from(["continue", "fail"])),
        summarize_on_max_steps=draw(st.booleans()),
    )


def _scripted_verifier(answers: list[bool]):  # type: ignore[no-untyped-def]
    calls = iter(answers)

    def verifier(*, output: str, run_state: object) -> Verdict:
        ok = next(calls, True)
        return Verdict.accept() if ok else Verdict.reject(f"not yet: {output[:5]}")

    return verifier


verifiers = st.none() | st.lists(st.booleans(), max_size=4).map(_scripted_verifier)
