"""Makes the per-job SSH keypair Secret MPI jobs need (random, so it lives in the shell, not the planner).

The Secret is owned by its job (ownerReference with the job's uid, so it goes with the job)
and mounted read-only with mode 0400 (manifests.build_pod). It is never shared: a Secret of
the same name that another object owns is not used (`secret_owner_verdict`).
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any, Literal

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


Verdict = Literal["ours", "stale", "foreign"]


def secret_owner_verdict(existing: Mapping[str, Any], job: JobRef) -> Verdict:
    """What to do with a Secret that already has the name the job's SSH Secret needs:
    ours (owned by this job's uid: keep its keys), stale (trainop's Secret of an earlier job
    of the same name, not yet garbage-collected: replace it), foreign (anything else, e.g. a
    user's Secret: never mount it)."""
    meta = existing.get("metadata") or {}
    owners = [o for o in meta.get("ownerReferences") or [] if isinstance(o, Mapping)]
    if any(o.get("uid") == job.uid for o in owners):
        return "ours"
    labels = meta.get("labels") or {}
    trainop_made = labels == {**labels, **job_labels(job.name)}
    earlier_job = bool(owners) and all(
        o.get("kind") == job.kind and o.get("name") == job.name for o in owners
    )
    return "stale" if trainop_made and earlier_job else "foreign"


class SecretConflict(Exception):
    """A Secret with the SSH Secret's name exists and belongs to someone else."""
