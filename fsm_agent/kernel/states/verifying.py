"""The ``verifying`` state: the output type, the verifier (or the done-tool requirement) judge a
plain answer.

With an output type the answer is validated first: one that does not validate is reported as
``output_invalid``, with the validation error as the model's feedback (it spends the
verification budget, and a run that spends it ends with ``output_invalid``). A valid answer then
goes to the verifier, if any, which gets the validated object as its ``output``.

The verifier is user code, so each call has a defined outcome: a verdict or a bool is the
answer; a verifier that raises, returns something else, writes a run-state attribute that is
not a field, or (async) overruns the policy's ``hook_timeout_s`` rejects the answer with
feedback that says it could not be verified (a ``hook_error`` event and a warning on the
``fsm_agent`` logger tell the operator), which spends the verification budget like any
rejection; a run that then ends unverified carries the failure as its error. An interrupt while
an async verifier runs cuts it short and becomes the state's outcome.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable

from pydantic_core import ValidationError

from ...errors import HookError, OutputValidationError
from ...log import logger
from ...machine.table import Outcome
from ...run.events import HookErrorEvent, TextEvent, VerificationFailedEvent
from ...run.state import explained
from ...values.define import record
from ..context import Interrupted, RunContext

__all__ = ["DONE_REMINDER", "Verdict", "handle_verifying"]

DONE_REMINDER = (
    "You answered without calling the 'done' tool. When the task is complete, call 'done' "
    "with your final answer; otherwise continue working."
)


@record(kw_only=False)
class Verdict:
    """A verifier's answer: accepted, or rejected with feedback for the model."""

    complete: bool
    feedback: str | None = None

    @classmethod
    def accept(cls) -> Verdict:
        """The answer is complete."""
        return cls(True)

    @classmethod
    def reject(cls, feedback: str) -> Verdict:
        """The answer is not complete; ``feedback`` goes back to the model."""
        return cls(False, feedback)


async def _awaited(answer: Awaitable[Verdict | bool], timeout_s: float) -> Verdict | bool:
    async with asyncio.timeout(timeout_s):
        return await answer


async def handle_verifying(ctx: RunContext) -> Outcome:
    """Ask the verifier (or apply the done-tool requirement) about the last answer."""
    rs = ctx.rs
    plan = ctx.plan
    feedback: str | None = None
    output: object = rs.last_text
    spec = plan.output_spec
    if spec is not None:
        try:
            output = spec.validate(rs.last_text)
        except ValidationError as exc:
            return await _invalid(ctx, spec.feedback(exc))
        ctx.error = None  # a valid answer: an earlier invalid one no longer explains the ending
    if plan.policy.require_done_tool:
        feedback = DONE_REMINDER
    elif plan.verifier is not None:
        try:
            answer = plan.verifier(output=output, run_state=rs)
            if not isinstance(answer, Verdict | bool) and not inspect.isawaitable(answer):
                raise TypeError(f"the verifier returned {type(answer).__name__}")
            verdict: Verdict | bool = (
                answer
                if isinstance(answer, Verdict | bool)
                else await ctx.effect(_awaited(answer, plan.policy.hook_timeout_s))
            )
            if not isinstance(verdict, Verdict | bool):
                raise TypeError(f"the verifier returned {type(verdict).__name__}")
        except Interrupted:
            return ctx.interrupted
        except Exception as caught:
            failure = explained(caught)
            logger.warning(
                "run %s: the verifier failed (%r); the answer counts as rejected",
                rs.run_id,
                failure,
            )
            if ctx.listening:
                error = repr(failure)
                await ctx.emit(HookErrorEvent(run_id=rs.run_id, hook="verifier", error=error))
            # Kept as the run's error, so a run that ends unverified says why (RunResult.error).
            ctx.error = HookError(f"the verifier failed: {failure!r}", hook="verifier")
            ctx.error.__cause__ = failure
            verdict = Verdict.reject(f"the answer could not be verified ({type(failure).__name__})")
        else:
            ctx.error = None  # a verdict: an earlier failure no longer explains the ending
        if isinstance(verdict, bool):
            verdict = Verdict(verdict, None if verdict else "The answer was not accepted.")
        if not verdict.complete:
            feedback = verdict.feedback or "The answer was not accepted."
    if feedback is None:
        return Outcome.VERIFIED
    rs.feedback = feedback
    if ctx.listening:
        if rs.last_text:  # a rejected answer is intermediate text; an accepted one is the final
            await ctx.emit(TextEvent(run_id=rs.run_id, text=rs.last_text))
        await ctx.emit(VerificationFailedEvent(run_id=rs.run_id, feedback=feedback))
    return Outcome.REJECTED


async def _invalid(ctx: RunContext, feedback: str) -> Outcome:
    """Send the validation error back as feedback (the rows decide whether it goes)."""
    rs = ctx.rs
    rs.feedback = feedback
    # Kept as the run's error, so a run that ends output_invalid says why (RunResult.error).
    ctx.error = OutputValidationError(
        "the final answer did not validate as the output type, and max_verifications "
        "rejections are spent; raise Policy.max_verifications, or make the type easier to "
        "answer",
        feedback=feedback,
    )
    if ctx.listening:
        if rs.last_text:
            await ctx.emit(TextEvent(run_id=rs.run_id, text=rs.last_text))
        await ctx.emit(VerificationFailedEvent(run_id=rs.run_id, feedback=feedback))
    return Outcome.OUTPUT_INVALID
