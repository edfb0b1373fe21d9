"""What the emulator knows of one request while it builds the response: its settings, keys,
the model's traits, the parsed request, the backend and the clock."""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.emulator.config import EmulatorConfig
from pipeline.emulator.models import ModelTraits
from pipeline.emulator.request import GenerateRequest


@dataclass(slots=True)
class Context:
    config: EmulatorConfig
    seed_key: bytes
    redirect_key: bytes
    traits: ModelTraits
    request: GenerateRequest
    vertex: bool
    base_url: str  # scheme://host of this request, no trailing slash
    seq: int  # request sequence number (responseId, redirect nonce)
    now: float  # Unix seconds
    project: str = ""
    location: str = ""
