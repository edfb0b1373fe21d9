"""The job's limits, shared through its database (the only limiter), and the retry decision.

=========================  ==============================================================
``JobLimits``              the job's requests per minute (GCRA grants, adaptive on 429s),
                           tokens per minute, grounded prompts per day and budget, drawn by
                           every process from one row per limit (``job_limits``)
``GroundingPause``         holds grounded calls back until the daily reset, midnight
                           Pacific (``daily``)
``RateLimiter``            one process's own pacing, no burst (exact GCRA): the redirect
                           resolver's lookups, which are no part of the model's quota
                           (``rate``, with ``pacing_rate``: a quota's rate to pace at)
``estimate_tokens``        a prompt's tokens before the call (``gemini.tokens``, beside the
                           request bodies it estimates)
``Backoff``                full-jitter exponential backoff; a server ``retryDelay`` is a floor
                           (``backoff``, with the bare ``retry_delay``)
``RetryPolicy``            one ``decide(error, attempts, step) -> Decision`` for every failed
                           step; ``Strikes`` counts the failures that stop a run (``policy``)
``server_delay``           the server's wait: ``Retry-After`` (seconds or an HTTP date) and
                           ``RetryInfo``, the longer (``retry_after``)
``DailyProbe``             bare 429s on grounded calls, probed with backoff before they pause
                           grounding for the day (``probe``, with ``ProbeSettings``)
``Storms``                 each model's capacity refusals (503, 429) since its last answer,
                           waited out up to ``[limits] overload_wait_s`` (``overload``)
=========================  ==============================================================

The 429 classifier (per-minute throttle, a named daily bucket, or a bare 429 to probe) lives
with the other error parsing, in :func:`pipeline.gemini.api_errors.classify_429`. Clocks and
sleeps are injectable; a test that needs the limits without a server uses them on a SQLite
file.
"""
