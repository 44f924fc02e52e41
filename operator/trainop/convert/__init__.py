"""`trainop convert`: Kubeflow training jobs -> TrainingJobs, with every unmapped field said.

Converts kubeflow.org/v1 PyTorchJob, TFJob, PaddleJob, XGBoostJob, JAXJob and MPIJob,
mpi-operator's kubeflow.org/v2beta1 MPIJob, and Kubeflow Trainer's
trainer.kubeflow.org/v1alpha1 ClusterTrainingRuntime / TrainingRuntime (to trainop runtimes
of the same name) and TrainJob (to a TrainingJob naming that runtime in spec.runtimeRef;
docs/runtimes.md). One module per kind does the
mapping (docs/migrate-from-kubeflow.md has the table); `common.Source` tracks which input
fields were read, so each field with no equivalent comes back as a `Note` naming its path,
and a field no converter knows is reported as not converted rather than dropped. Every
result is checked with the operator's own validation (`validation.checked_spec`:
the schema, the semantic rules and the names).

Neighbours: `cli/convert.py` reads the files (trainop.yamlio) and prints; this package is
pure (dicts in, dicts and notes out).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from trainop.convert import jax, mpi, paddle, pytorch, tensorflow, trainjob, xgboost
from trainop.convert.common import ConvertError, Note, Source
from trainop.convert.runtime import GROUP as TRAINER_GROUP
from trainop.convert.runtime import RUNTIME_KINDS, RuntimeKey, index_runtimes
from trainop.convert.trainer_runtime import convert_runtime
from trainop.planner import InvalidJob
from trainop.runtimes import RuntimeProblem, check_runtime, resolve, runtime_index
from trainop.validation import checked_spec

Converter = Callable[[Source], dict[str, Any]]
V1 = "kubeflow.org/v1"
MPI_V2 = "kubeflow.org/v2beta1"
TRAINER = f"{TRAINER_GROUP}/v1alpha1"
NOT_CONVERTED = (
    "not converted: trainop convert does not know this field; carry it over by hand if it "
    "matters (see docs/migrate-from-kubeflow.md)"
)

_V1_KINDS: dict[str, Converter] = {
    "PyTorchJob": pytorch.convert,
    "TFJob": tensorflow.convert,
    "PaddleJob": paddle.convert,
    "XGBoostJob": xgboost.convert,
    "MPIJob": mpi.convert,
    "JAXJob": jax.convert,
}
SUPPORTED = (
    *(f"{V1} {k}" for k in _V1_KINDS),
    f"{MPI_V2} MPIJob",
    f"{TRAINER} TrainJob",
    f"{TRAINER} ClusterTrainingRuntime",
    f"{TRAINER} TrainingRuntime",
)


@dataclass
class Converted:
    """The outcome for one input document: the trainop object (a TrainingJob, or the
    runtime a Kubeflow runtime becomes; None when it cannot be made), notes on unmapped
    fields, and errors (unconvertible, or refused by trainop's checks)."""

    source: str  # e.g. "PyTorchJob team-a/bert", for messages
    job: dict[str, Any] | None = None
    notes: list[Note] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def is_runtime(doc: Mapping[str, Any]) -> bool:
    return doc.get("apiVersion") == TRAINER and doc.get("kind") in RUNTIME_KINDS


def convert_documents(
    docs: Sequence[Mapping[str, Any]], runtimes: Iterable[Mapping[str, Any]] = ()
) -> list[Converted]:
    """Each document of `docs` converted, in order: jobs to TrainingJobs, Kubeflow runtimes
    to trainop runtimes. Runtimes in `runtimes` (--runtime) only serve the TrainJobs that
    name them: they are used for the checks, not converted."""
    index = index_runtimes([*runtimes, *(d for d in docs if is_runtime(d))])
    return [convert_one(d, index) for d in docs]


def _trainop_runtimes(index: Mapping[RuntimeKey, Mapping[str, Any]]) -> dict[Any, Any]:
    """The trainop runtimes the Kubeflow ones become (those that convert), for the checks."""
    out = []
    for body in index.values():
        try:
            out.append(convert_runtime(Source(body)))
        except (ConvertError, AttributeError, TypeError, ValueError, KeyError):
            continue  # its own conversion reports why
    return runtime_index(out)


def convert_one(
    doc: Mapping[str, Any], runtimes: Mapping[RuntimeKey, Mapping[str, Any]]
) -> Converted:
    src = Source(doc)
    out = Converted(src.who)
    try:
        out.job = _dispatch(src, runtimes)
    except ConvertError as exc:
        out.errors.append(f"{exc.path}: {exc.detail}")
        return out
    except (AttributeError, TypeError, ValueError, KeyError) as exc:
        # A field of an unexpected type somewhere deep (a container that is a string, ...):
        # one line, never a traceback; the API server would have refused the object too.
        out.errors.append(f"malformed {src.kind}: {type(exc).__name__}: {exc}")
        return out
    out.notes = [*src.notes, *(Note(p, NOT_CONVERTED) for p in src.leftovers())]
    if is_runtime(doc):
        problem = check_runtime(out.job)
        out.errors = [f"the runtime would be invalid: {problem}"] if problem else []
    else:
        out.errors = check(out.job, _trainop_runtimes(runtimes) if _names_runtime(out.job) else {})
    return out


def _names_runtime(job: Mapping[str, Any]) -> bool:
    return bool((job.get("spec") or {}).get("runtimeRef"))


def _dispatch(src: Source, runtimes: Mapping[RuntimeKey, Mapping[str, Any]]) -> dict[str, Any]:
    api, kind = src.body.get("apiVersion"), src.body.get("kind")
    if api == V1 and kind in _V1_KINDS:
        return _V1_KINDS[kind](src)
    if api == MPI_V2 and kind == "MPIJob":
        return mpi.convert(src)
    if api == TRAINER and kind == "TrainJob":
        return trainjob.convert(src, runtimes)
    if is_runtime(src.body):
        return convert_runtime(src)
    if kind == "TrainingJob":
        raise ConvertError("kind", "already a trainop TrainingJob: nothing to convert")
    if not kind:
        raise ConvertError("kind", "required: the object has no kind")
    raise ConvertError(
        "apiVersion/kind", f"{api} {kind} is not a kind trainop converts: {', '.join(SUPPORTED)}"
    )


def check(
    job: Mapping[str, Any], runtimes: Mapping[Any, Mapping[str, Any]] | None = None
) -> list[str]:
    """What trainop's validation says about the converted job ([] when it is valid); a job
    naming a runtime is checked merged with it (`runtimes`, keyed as runtime_index keys)."""
    resolved = resolve(job, runtimes or {})
    if isinstance(resolved, RuntimeProblem):
        return [f"the TrainingJob would wait: {resolved}"]
    try:
        checked_spec(resolved.body)
    except InvalidJob as exc:
        return [f"the TrainingJob would be Invalid: {exc.field}: {exc.detail}"]
    return []


__all__ = [
    "NOT_CONVERTED",
    "SUPPORTED",
    "Converted",
    "Note",
    "check",
    "convert_documents",
    "convert_one",
    "is_runtime",
]
