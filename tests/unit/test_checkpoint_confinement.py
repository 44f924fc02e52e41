"""Checkpoint paths are confined (issue 35; docs/progress.md): spec.checkpoint names a volume
of the pod template and a path under it (trainop.progress.checkpoint_root, through
trainop.planner.checkpoint_location), a reported path outside it is refused
(trainop.progress.confined / check_checkpoint, 403 and a Warning Event at the endpoint),
and TRAINOP_RESUME_FROM only ever points inside it (trainop.progress.resume_env). What the
operator checks is the string alone; a symlink inside the volume is the job's own doing."""

from __future__ import annotations

from typing import Any

import pytest

from tests.builders import JobBuilder, job
from trainop import progress
from trainop.planner import InvalidJob, check_semantics, checkpoint_location, parse_spec

ROOT = "/checkpoints/runs/bert"

# name, reported path, the refusal's words ("" = taken)
PATHS = [
    ("a-file-inside", "/checkpoints/runs/bert/step-10.pt", ""),
    ("a-directory-deep-inside", "/checkpoints/runs/bert/checkpoint-10/model.safetensors", ""),
    ("the-root-itself", "/checkpoints/runs/bert", ""),
    ("unicode-inside", "/checkpoints/runs/bert/шаг-10.pt", ""),
    ("dot-dot-escape", "/checkpoints/runs/bert/../../../etc/passwd", "no empty, . or .. parts"),
    ("dot-dot-inside", "/checkpoints/runs/bert/a/../b.pt", "no empty, . or .. parts"),
    ("dot-part", "/checkpoints/runs/bert/./b.pt", "no empty, . or .. parts"),
    ("double-slash", "/checkpoints/runs/bert//b.pt", "no empty, . or .. parts"),
    ("trailing-slash", "/checkpoints/runs/bert/", "no empty, . or .. parts"),
    ("relative", "checkpoints/runs/bert/b.pt", "must be an absolute path"),
    ("sibling-prefix", "/checkpoints/runs/bert-evil/b.pt", "outside the job's checkpoint location"),
    ("parent", "/checkpoints/runs", "outside the job's checkpoint location"),
    ("elsewhere", "/etc/shadow", "outside the job's checkpoint location"),
    ("nul-byte", "/checkpoints/runs/bert/a\x00.pt", "no control characters"),
    ("newline", "/checkpoints/runs/bert/a\n.pt", "no control characters"),
    ("too-long", "/checkpoints/runs/bert/" + "a" * 1100, "longer than 1024"),
    ("empty", "", "non-empty string"),
    ("not-a-string", 42, "non-empty string"),
]


@pytest.mark.parametrize(("name", "path", "words"), PATHS, ids=[p[0] for p in PATHS])
def test_reported_paths_are_confined(name: str, path: Any, words: str) -> None:
    why = progress.confined(path, ROOT)
    assert (words in why) if words else why == "", why


def test_without_a_location_no_path_is_taken() -> None:
    assert "names no checkpoint location" in progress.confined("/checkpoints/a.pt", None)


def test_a_refused_report_names_the_path_and_why() -> None:
    report = progress.parse_report(
        {"step": 5, "checkpoint": {"path": "/etc/../root/x.pt", "step": 5}}
    )
    with pytest.raises(progress.CheckpointRefused, match=r"checkpoint.path '/etc/../root/x.pt'"):
        progress.check_checkpoint(report, ROOT)
    progress.check_checkpoint(progress.parse_report({"step": 5}), None)  # no checkpoint: fine


RESUMES = [
    ("inside", "/checkpoints/runs/bert/step-9.pt", ROOT, "/checkpoints/runs/bert/step-9.pt"),
    ("outside-an-old-status", "/tmp/step-9.pt", ROOT, None),
    ("no-location", "/checkpoints/runs/bert/step-9.pt", None, None),
    ("escape", "/checkpoints/runs/bert/../../x", ROOT, None),
]


@pytest.mark.parametrize(("name", "path", "root", "resume"), RESUMES, ids=[r[0] for r in RESUMES])
def test_resume_from_only_points_inside(
    name: str, path: str, root: str | None, resume: str | None
) -> None:
    env = progress.resume_env({"progress": {"lastCheckpoint": {"path": path, "step": 9}}}, root)
    assert env.get("TRAINOP_RESUME_FROM") == resume
    assert ("TRAINOP_RESUME_STEP" in env) == (resume is not None)


def _tf() -> JobBuilder:
    return job("tf").framework("tensorflow").role("Chief", 1, 8).role("Worker", 2, 8)


def _unmounted() -> JobBuilder:
    b = job("a", workers=2, gpus=8).checkpoint()
    b.spec["replicaSpecs"]["Worker"]["template"]["spec"]["containers"][0].pop("volumeMounts")
    return b


def _two_mounts() -> JobBuilder:
    b = _tf().checkpoint(roles=("Chief",))
    return b.checkpoint(mount="/other", roles=("Worker",))


# name, job, the location ("" = Invalid), the field and words of the Invalid message
LOCATIONS: list[tuple[str, JobBuilder, str, str, str]] = [
    ("none", job("a", workers=2, gpus=8), "", "", ""),
    ("the-mount", job("a", workers=2, gpus=8).checkpoint(), "/checkpoints", "", ""),
    (
        "a-path-under-it",
        job("a", workers=2, gpus=8).checkpoint(mount="/data/", path="runs/bert"),
        "/data/runs/bert",
        "",
        "",
    ),
    ("both-ranked-roles", _tf().checkpoint(roles=("Chief", "Worker")), "/checkpoints", "", ""),
    (
        "no-volume-named",
        job("a", workers=2, gpus=8).set("checkpoint", {"gracePeriodSeconds": 60}),
        "",
        "spec.checkpoint.volume",
        "required with spec.checkpoint",
    ),
    (
        "volume-not-in-template",
        job("a", workers=2, gpus=8).set("checkpoint", {"volume": "ckpt"}),
        "",
        "spec.checkpoint.volume",
        "'ckpt' is not a volume of spec.replicaSpecs.Worker.template",
    ),
    (
        "a-ranked-role-without-it",
        _tf().checkpoint(roles=("Chief",)),
        "",
        "spec.checkpoint.volume",
        "spec.replicaSpecs.Worker.template",
    ),
    (
        "declared-not-mounted",
        _unmounted(),
        "",
        "spec.checkpoint.volume",
        "no container of spec.replicaSpecs.Worker mounts volume",
    ),
    (
        "two-mount-paths",
        _two_mounts(),
        "",
        "spec.checkpoint.volume",
        "mount it at one mountPath",
    ),
    (
        "path-escapes",
        job("a", workers=2, gpus=8).checkpoint(path="../etc"),
        "",
        "spec.checkpoint.path",
        "no empty, . or .. parts",
    ),
    (
        "path-absolute",
        job("a", workers=2, gpus=8).checkpoint(path="/etc"),
        "",
        "spec.checkpoint.path",
        "relative directory",
    ),
    (
        "mount-not-clean",
        job("a", workers=2, gpus=8).checkpoint(mount="/a/../b"),
        "",
        "spec.checkpoint.volume",
        "not a clean absolute path",
    ),
]


@pytest.mark.parametrize(
    ("name", "builder", "root", "field", "words"), LOCATIONS, ids=[c[0] for c in LOCATIONS]
)
def test_a_checkpoint_location_or_invalid_naming_the_field(
    name: str, builder: JobBuilder, root: str, field: str, words: str
) -> None:
    spec = parse_spec(builder.build())
    if field:
        with pytest.raises(InvalidJob) as err:
            check_semantics(spec)
        assert err.value.field == field and words in err.value.detail, err.value.detail
        assert "volume" in err.value.detail  # the fix names what to add
    else:
        check_semantics(spec)
        assert checkpoint_location(spec) == (root or None)
