"""A 404 for the model itself stops the run at once with exit 2, the question given back."""

from __future__ import annotations

from pipeline.emulator import error_bodies
from pipeline.errors import MODEL_GONE_STOP
from pipeline.exit_codes import ExitStatus, run_status
from pipeline.gemini.api_errors import ModelNotFound, PermanentError, classify_http_error
from pipeline.limits.policy import GROUND, STRUCTURE, RetryPolicy


def test_a_404_for_the_model_stops_the_run_and_gives_the_question_back() -> None:
    body = error_bodies.model_not_found("gemini-2.0-flash", "v1beta").body()
    error = classify_http_error(404, body)
    assert isinstance(error, ModelNotFound) and error.error_class == "model_not_found"
    for step in (GROUND, STRUCTURE):
        decision = RetryPolicy().decide(error, 1, step)
        assert decision.state is None and not decision.spend_attempt
        assert decision.stop is not None and decision.stop.startswith(MODEL_GONE_STOP)
        assert run_status(stopped=decision.stop, failed={}) == ExitStatus.USAGE
    vertex = error_bodies.publisher_model_not_found(
        "projects/p/locations/global/publishers/google/models/x"
    ).body()
    assert isinstance(classify_http_error(404, vertex), ModelNotFound)


def test_another_404_is_the_questions_own() -> None:
    other = (
        b'{"error": {"code": 404, "message": "Requested entity was not found.",'
        b' "status": "NOT_FOUND"}}'
    )
    error = classify_http_error(404, other)
    assert isinstance(error, PermanentError) and not isinstance(error, ModelNotFound)
    assert run_status(stopped="budget: spent", failed={}) == ExitStatus.FAILED
