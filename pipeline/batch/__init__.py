"""The same job through a Batch API: the runner's rounds, submission, collection, the
verdicts on result lines, and the budget a batch holds."""
