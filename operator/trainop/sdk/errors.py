"""The SDK's exceptions: one type per thing a caller may want to catch, each message naming
the field or the object that is wrong or missing, and the fix where there is one.

Neighbours: raised by trainop.sdk.functions and trainop.sdk.jobs (pure checks) and by
trainop.sdk.client, which turns the API server's refusals (404, 409, 422, ...) into these.
"""

from __future__ import annotations


class TrainopError(Exception):
    """Base of every SDK error."""


class InvalidJobError(TrainopError, ValueError):
    """A job (or train() argument) that can never be accepted; `field` is its path."""

    def __init__(self, field: str, detail: str) -> None:
        self.field, self.detail = field, detail
        super().__init__(f"{field}: {detail}")


class FunctionError(InvalidJobError):
    """A function train() cannot send: no source, free variables, arguments not JSON, too big."""


class NotFoundError(TrainopError, LookupError):
    """An object that is not there; `kind`, `name` and `namespace` say which."""

    def __init__(self, kind: str, name: str, namespace: str | None, hint: str = "") -> None:
        self.kind, self.name, self.namespace = kind, name, namespace
        where = f"{namespace}/{name}" if namespace else name
        super().__init__(f"{kind} {where} not found" + (f": {hint}" if hint else ""))


class JobNotFoundError(NotFoundError):
    def __init__(self, name: str, namespace: str) -> None:
        super().__init__("TrainingJob", name, namespace)


class RuntimeNotFoundError(NotFoundError):
    pass


class NotInstalledError(TrainopError):
    """trainop's CRDs (or one of them) are not installed on the cluster."""


class JobExistsError(TrainopError):
    def __init__(self, name: str, namespace: str) -> None:
        self.name, self.namespace = name, namespace
        super().__init__(
            f"TrainingJob {namespace}/{name} already exists: pick another name (or leave "
            "name=None for a generated one), or delete it first"
        )


class ForbiddenError(TrainopError, PermissionError):
    pass


class JobFailedError(TrainopError):
    """wait() saw the job end in a phase it was not waiting for."""

    def __init__(self, name: str, phase: str, message: str) -> None:
        self.name, self.phase, self.message = name, phase, message
        super().__init__(f"TrainingJob {name} is {phase}" + (f": {message}" if message else ""))


class WaitTimeoutError(TrainopError, TimeoutError):
    def __init__(self, name: str, until: tuple[str, ...], phase: str, seconds: float) -> None:
        self.name, self.until, self.phase = name, until, phase
        super().__init__(
            f"TrainingJob {name} not {' or '.join(until)} within {seconds:g} s; "
            f"it is {phase or 'not yet seen by the operator'}"
        )


class ApiError(TrainopError):
    """Any other refusal of the API server, with its status code and message."""

    def __init__(self, status: int, message: str) -> None:
        self.status = status
        super().__init__(f"API server answered {status}: {message}")
