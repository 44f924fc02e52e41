"""trainop's Python SDK: TrainingJobs from a notebook or a script (`pip install trainop` gives
the `trainop` command and this package).

- `TrainopClient` (trainop.sdk.client): list_runtimes, submit, train, get, wait, logs,
  progress, events, explain, suspend, resume, delete, against a cluster.
- `LocalBackend` (trainop.sdk.local): the same train() as local processes.
- trainop.sdk.errors: the exceptions, each naming the field or the missing object.

The pure parts (trainop.sdk.functions: a function made into a payload; trainop.sdk.jobs:
the TrainingJob train() submits, wait's and logs' decisions) never talk to the API server;
only trainop.sdk.client does (import-linter contracts in pyproject.toml). The client is
imported lazily here, so `from trainop.sdk import LocalBackend` needs no cluster library.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from trainop.sdk.errors import (
    ApiError,
    ForbiddenError,
    FunctionError,
    InvalidJobError,
    JobExistsError,
    JobFailedError,
    JobNotFoundError,
    NotFoundError,
    NotInstalledError,
    RuntimeNotFoundError,
    TrainopError,
    WaitTimeoutError,
)
from trainop.sdk.local import LocalBackend, LocalJob

if TYPE_CHECKING:
    from trainop.sdk.client import Job, Runtime, TrainopClient

__all__ = [
    "ApiError",
    "ForbiddenError",
    "FunctionError",
    "InvalidJobError",
    "Job",
    "JobExistsError",
    "JobFailedError",
    "JobNotFoundError",
    "LocalBackend",
    "LocalJob",
    "NotFoundError",
    "NotInstalledError",
    "Runtime",
    "RuntimeNotFoundError",
    "TrainopClient",
    "TrainopError",
    "WaitTimeoutError",
]


def __getattr__(name: str) -> Any:
    if name in ("TrainopClient", "Job", "Runtime"):
        from trainop.sdk import client

        return getattr(client, name)
    raise AttributeError(f"module 'trainop.sdk' has no attribute {name!r}")
