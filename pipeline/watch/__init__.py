"""Watching a run: logs, the progress bar or records, Prometheus metrics, safe terminal text."""
