"""Questions in: JSONL, CSV or a SQL query, streamed, idempotent on the id, fingerprinted."""
