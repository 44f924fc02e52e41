"""Makes the per-job SSH keypair Secret MPI jobs need (random, so it lives in the shell, not the planner).

The Secret is owned by its job (ownerReference with the job's uid) and mounted read-only
with mode 0400 (manifests.build_pod). Its name carries a digest of the job's uid
(frameworks.ssh_secret_name), so it is never shared: not with a later job of the same name,
not with anyone's Secret called `<job>-ssh`; a 409 on create can only be this job's own.
"""

from __future__ import annotations

import base64
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from trainop.manifests import JobRef, job_labels


def ssh_keypair(comment: str) -> tuple[str, str]:
    """(private key in OpenSSH format, public key line) for a fresh ed25519 key."""
    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.OpenSSH,
        serialization.NoEncryption(),
    ).decode()
    public = key.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )
    return private, f"{public.decode()} {comment}\n"


def ssh_secret(job: JobRef, name: str) -> dict[str, Any]:
    """A Secret every pod of the job mounts: launcher and workers trust each other only."""
    private, public = ssh_keypair(f"trainop-{job.namespace}-{job.name}")

    def b64(text: str) -> str:
        return base64.b64encode(text.encode()).decode()

    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": name,
            "namespace": job.namespace,
            "labels": job_labels(job.name),
            "ownerReferences": [job.owner_reference()],
        },
        "data": {
            "id_ed25519": b64(private),
            "id_ed25519.pub": b64(public),
            "authorized_keys": b64(public),
        },
    }
