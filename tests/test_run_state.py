"""The run state's fast constructor gives what validation gives."""

from __future__ import annotations

from fsm_agent import RunState


def test_start_equals_a_validated_fresh_state() -> None:
    """RunState.start builds exactly RunState(run_id=...): every field (a field added to the
    model but not to start() fails here), its value, and what was set explicitly."""
    fast, validated = RunState.start("run_1"), RunState(run_id="run_1")
    assert list(fast.__dict__) == list(type(fast).model_fields)
    assert fast.__dict__ == validated.__dict__
    assert fast == validated
    assert fast.model_fields_set == validated.model_fields_set
    assert fast.model_dump_json() == validated.model_dump_json()
    assert RunState.model_validate_json(fast.model_dump_json()) == validated


def test_started_states_share_no_mutable_value() -> None:
    """Two runs' states hold their own lists and dicts."""
    first, second = RunState.start("a"), RunState.start("b")
    first.messages.append(None)  # type: ignore[arg-type]
    first.tool_outputs["c"] = "x"
    assert second.messages == []
    assert second.tool_outputs == {}
    mutable = [k for k, v in first.__dict__.items() if isinstance(v, list | dict)]
    assert all(first.__dict__[k] is not second.__dict__[k] for k in mutable)
