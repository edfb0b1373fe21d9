"""Vertex jobs against the emulator: the overrides that make a job a Vertex one (online or
batch prediction through the emulator's Cloud Storage), and the service-account file whose
tokens the emulator issues."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.credentials import service_account_info

VERTEX = ['model.backend="vertex"', 'model.project="proj-1"', 'model.location="us-central1"']
GCS_INPUT = "gs://ground-test/in"
GCS_OUTPUT = "gs://ground-test/out"


def vertex_batch(base_url: str, *, poll_s: float = 0.05) -> list[str]:
    """A Vertex job in batch mode, its files in the emulator's buckets at ``base_url``,
    polled every ``poll_s`` seconds at first (four times that at most)."""
    return [
        *VERTEX,
        'model.mode="batch"',
        f'batch.gcs_input="{GCS_INPUT}"',
        f'batch.gcs_output="{GCS_OUTPUT}"',
        f'batch.gcs_endpoint="{base_url}"',
        f"batch.poll_initial_s={poll_s}",
        f"batch.poll_max_s={poll_s * 4}",
    ]


def service_account_file(directory: Path, token_uri: str) -> Path:
    """A fresh service-account key file whose tokens come from ``token_uri``."""
    path = directory / "service-account.json"
    path.write_text(json.dumps(service_account_info(token_uri)), encoding="utf-8")
    return path
