"""A throw-away Google service account whose tokens come from the emulator."""

from __future__ import annotations

from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa


def service_account_info(token_uri: str, project: str = "proj-1") -> dict[str, Any]:
    """A service-account key (fresh RSA key) as google-auth reads it from its JSON file."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return {
        "type": "service_account",
        "project_id": project,
        "private_key_id": "k1",
        "private_key": key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ).decode(),
        "client_email": f"ground@{project}.iam.gserviceaccount.com",
        "client_id": "1",
        "token_uri": token_uri,
    }
