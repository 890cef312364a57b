"""Bounce fixtures (written from RFC 3464 / RFC 5965 and what each MTA sends) and their facts."""

from __future__ import annotations

from pathlib import Path

BOUNCES = Path(__file__).parent.parent / "fixtures" / "bounces"
ADDRESS = "reader@example.net"
"""The failed recipient every fixture names."""
MESSAGE_ID = "<5f2c1e0d9b8a4c7e8f6a5b4c3d2e1f00@papers.example.org>"
"""The Message-ID of the returned digest in every fixture that quotes it."""
BOUNCE_ADDRESS = "bounces@papers.example.org"
SECRET = "test-secret-key-0123456789-abcdefghijklmnop"


def fixture(name: str, *, address: str = ADDRESS, message_id: str = MESSAGE_ID) -> bytes:
    """A fixture's bytes with its recipient and returned Message-ID replaced."""
    data = (BOUNCES / name).read_bytes()
    data = data.replace(ADDRESS.encode(), address.encode())
    return data.replace(MESSAGE_ID.encode(), message_id.encode())
