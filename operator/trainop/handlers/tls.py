"""TLS of the progress endpoint (issue 35): the serving certificate, kept current.

Three modes (`trainop run --progress-tls`, the chart's `operator.progress.tls.mode`):
- `managed` (the default): trainop keeps a CA and a serving certificate it signs in a Secret
  of its own namespace (`--progress-tls-secret`), made on first start and renewed before it
  expires (kube.certs decides when); every replica reads the same Secret, a replica that
  loses the race to write it (409) reads the winner's.
- `secret`: the Secret is someone else's, e.g. cert-manager's (`tls.crt`, `tls.key`,
  `ca.crt`): trainop serves it and re-reads it, and never writes it.
- `off`: plain HTTP, only when asked for explicitly, with a warning at start-up.

The CA bundle goes to the pods through the operator config (`progress_ca`, which
trainop.progress.wire_pod puts beside the token); the server's context is reloaded in place
when the Secret changes, so connections after a rotation get the new certificate.

Neighbours: kube.certs (the certificates, pure), kube.client (the Secret), handlers.progress
(`serve` takes the context), handlers.operator (starts `TlsKeeper` with the endpoint).
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from trainop.kube import certs
from trainop.kube.client import KubeApi

log = logging.getLogger("trainop.progress")

MODES = ("managed", "secret", "off")
CHECK_SECONDS = 3600.0  # how often the Secret is looked at again


class TlsError(RuntimeError):
    """The endpoint cannot serve TLS as configured; the message names the flag and the fix."""


@dataclass
class TlsKeeper:
    """The endpoint's certificate: loaded into `context`, renewed and reloaded."""

    mode: str
    namespace: str
    secret: str
    names: list[str]
    context: ssl.SSLContext | None = None
    bundle: certs.Bundle | None = None
    version: str = ""
    files: str = field(default_factory=lambda: tempfile.mkdtemp(prefix="trainop-tls-"))

    def now(self) -> datetime:
        return datetime.now(UTC).replace(tzinfo=None)

    def ensure(self, api: KubeApi) -> certs.Bundle:
        """The bundle to serve, renewed first when due (managed mode); raises TlsError when
        there is none to serve (secret mode, the Secret missing or incomplete)."""
        for _attempt in range(3):
            found = self._read(api)
            data, version = found if found is not None else ({}, None)
            bundle = certs.from_secret_data(data)
            if self.mode == "secret":
                if bundle is None:
                    raise TlsError(
                        f"Secret {self.namespace}/{self.secret} holds no tls.crt and tls.key "
                        "(--progress-tls secret: cert-manager's Certificate writes them; see "
                        "the chart's operator.progress.tls)"
                    )
                return self._take(bundle, version or "")
            renew = certs.due(bundle, self.names, self.now())
            if not renew:
                assert bundle is not None
                return self._take(bundle, version or "")
            fresh = certs.issue(self.now(), self.names, bundle, renew)
            try:
                api.write_secret(self.namespace, self.secret, certs.to_secret_data(fresh), version)
            except Exception as err:  # another replica wrote first (409): read theirs
                log.info("progress TLS Secret not written (%s); reading it again", err)
                continue
            log.info(
                "progress TLS: %s renewed in Secret %s/%s (serving certificate until %s)",
                "CA and certificate" if renew == "ca" else "certificate",
                self.namespace,
                self.secret,
                certs.not_after(fresh.tls_crt).isoformat(),
            )
        found = self._read(api)
        bundle = certs.from_secret_data(found[0] if found else None)
        if bundle is None:
            raise TlsError(f"Secret {self.namespace}/{self.secret} could not be written or read")
        return self._take(bundle, found[1] if found else "")

    def _read(self, api: KubeApi) -> tuple[dict[str, str], str] | None:
        """The Secret; a refusal (403) becomes a TlsError naming the grant and the fix."""
        try:
            return api.read_secret(self.namespace, self.secret)
        except Exception as err:
            if getattr(err, "status", None) != 403:
                raise
            verbs = "get, create and update" if self.mode == "managed" else "get"
            raise TlsError(
                f"Secret {self.namespace}/{self.secret}: forbidden; the operator's "
                f"ServiceAccount needs {verbs} on it (the chart's Role <release>-progress-tls "
                "grants them; docs/rbac.md), or run with --progress-tls off"
            ) from None

    def _take(self, bundle: certs.Bundle, version: str) -> certs.Bundle:
        """Serve `bundle`: its certificate and key loaded into the (one) server context."""
        if self.context is None:
            self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            self.context.minimum_version = ssl.TLSVersion.TLSv1_2
        if bundle != self.bundle:
            cert = os.path.join(self.files, "tls.crt")
            key = os.path.join(self.files, "tls.key")
            fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(bundle.tls_key)
            with open(cert, "w") as f:
                f.write(bundle.tls_crt)
            self.context.load_cert_chain(cert, key)  # new handshakes get it; no restart
        self.bundle, self.version = bundle, version
        return bundle

    async def keep(
        self, api: KubeApi, on_change: Callable[[certs.Bundle], None] | None = None
    ) -> None:
        """Look at the Secret every CHECK_SECONDS; renew (managed) and reload when due."""
        while True:
            await asyncio.sleep(CHECK_SECONDS)
            before = self.bundle
            try:
                bundle = await asyncio.to_thread(self.ensure, api)
            except Exception as err:  # the API server away: the current certificate serves on
                log.warning("progress TLS Secret check failed: %s", err)
                continue
            if bundle != before and on_change is not None:
                on_change(bundle)
