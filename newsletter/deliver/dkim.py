"""DKIM signing (RFC 6376) of every message the service sends, with dkimpy.

Configured by the optional ``dkim:`` section: a selector, the signing domain (the sender's
domain by default) and the private key, from a PEM file next to the config or from an
environment variable. The key is loaded once per run; a missing or unreadable key is a
:class:`ConfigError` that names the config key and the file, raised before anything is sent.
dkimpy (and the DNS library it brings) is imported only when ``dkim:`` is configured.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from newsletter.config import Config, DkimSettings
from newsletter.deliver.message import Envelope
from newsletter.errors import ConfigError


class DkimSigner:
    """Prepends a ``DKIM-Signature`` header to finished RFC 5322 bytes."""

    def __init__(self, settings: DkimSettings, domain: str, private_key: bytes) -> None:
        import dkim

        self._dkim = dkim
        self.selector = settings.selector.encode("ascii")
        self.domain = domain.encode("ascii")
        self.headers = [h.encode("ascii") for h in settings.headers]
        self._key = private_key

    def header(self, data: bytes) -> bytes:
        """The ``DKIM-Signature`` header field (with its CRLF) for ``data``."""
        return bytes(
            self._dkim.sign(
                data,
                self.selector,
                self.domain,
                self._key,
                include_headers=self.headers,
                canonicalize=(b"relaxed", b"relaxed"),
            )
        )

    def sign(self, data: bytes) -> bytes:
        """``data`` with its ``DKIM-Signature`` header prepended."""
        return self.header(data) + data

    def sign_envelope(self, envelope: Envelope) -> Envelope:
        """The envelope with the header prepended; what the envelope vouched for its bytes
        (CRLF only, no line beginning with a dot) still holds only if the header keeps it."""
        header = self.header(envelope.data)
        crlf = envelope.crlf and header.count(b"\n") == header.count(b"\r\n") == header.count(b"\r")
        dotted = header.startswith(b".") or b"\n." in header
        return dataclasses.replace(
            envelope,
            data=header + envelope.data,
            crlf=crlf,
            dot_lines=envelope.dot_lines or dotted,
        )

    @classmethod
    def from_config(cls, config: Config) -> DkimSigner | None:
        """The configured signer, or ``None`` when ``dkim:`` is not set."""
        settings = config.settings.dkim
        if settings is None:
            return None
        domain = settings.domain or config.settings.sender.message_domain
        key = _load_key(config, settings)
        signer = cls(settings, domain.encode("idna").decode("ascii"), key)
        try:  # fail now, with the config key named, rather than on the first digest
            signer.sign(b"From: a@example.org\r\nSubject: check\r\n\r\nkey check\r\n")
        except signer._dkim.DKIMException as e:
            raise ConfigError(
                str(config.path),
                [f"{config.path}: dkim: the private key cannot sign: {e}; use an RSA key in PEM"],
            ) from e
        return signer


def _load_key(config: Config, settings: DkimSettings) -> bytes:
    where = f"{config.path}: dkim"
    if settings.private_key_env and os.environ.get(settings.private_key_env):
        return os.environ[settings.private_key_env].encode()
    if settings.private_key_file is None:
        raise ConfigError(
            str(config.path),
            [
                f"{where}: no private key: set ${settings.private_key_env} "
                "or dkim.private_key_file (a PEM file, e.g. made by `dknewkey`)"
            ],
        )
    path = Path(config.base_dir, settings.private_key_file)
    try:
        return path.read_bytes()
    except OSError as e:
        raise ConfigError(
            str(config.path),
            [f"{where}.private_key_file: cannot read {path}: {e.strerror}"],
        ) from e


def maybe_sign(signer: DkimSigner | None, envelope: Envelope) -> Envelope:
    """``envelope`` DKIM-signed by ``signer``, or unchanged when there is no signer."""
    return envelope if signer is None else signer.sign_envelope(envelope)
