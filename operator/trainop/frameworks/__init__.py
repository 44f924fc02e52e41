"""Per-framework wiring registry: which roles each framework allows and what its pods need.

`validate(framework, roles)` checks spec.replicaSpecs (error sentences naming the field
and the fix); `wire(framework, inp)` returns the env, config files, ports, ssh need and
command wrappers for a placed gang. Pure: the planner calls these and builds objects.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from types import MappingProxyType

from trainop.frameworks import jax, mpi, mxnet, paddle, pytorch, tensorflow
from trainop.frameworks.base import (
    CONFIG_MOUNT_PATH,
    FrameworkSpec,
    Member,
    Wiring,
    WiringInput,
    config_map_name,
    gang_has_service,
    hosts_named,
    member_host,
    pod_name,
    ssh_secret_name,
)

__all__ = [
    "CONFIG_MOUNT_PATH",
    "FRAMEWORKS",
    "FrameworkSpec",
    "Member",
    "UnknownFrameworkError",
    "Wiring",
    "WiringInput",
    "config_map_name",
    "gang_has_service",
    "get",
    "hosts_named",
    "member_host",
    "pod_name",
    "ssh_secret_name",
    "validate",
    "wire",
]

FRAMEWORKS: Mapping[str, FrameworkSpec] = MappingProxyType(
    {
        s.name: s
        for s in sorted(
            (jax.SPEC, mpi.SPEC, mxnet.SPEC, paddle.SPEC, pytorch.SPEC, tensorflow.SPEC),
            key=lambda s: s.name,
        )
    }
)


class UnknownFrameworkError(ValueError):
    """spec.framework.name is not one trainop wires."""


def _unknown(name: str) -> str:
    known = ", ".join(FRAMEWORKS)
    if name.lower() in FRAMEWORKS:
        fix = f"write it in lower case: {name.lower()}"
    else:
        close = difflib.get_close_matches(name.lower(), list(FRAMEWORKS), n=1)
        fix = f"did you mean {close[0]}? Known: {known}" if close else f"use one of {known}"
    return f"spec.framework.name: unknown framework {name!r}; {fix}."


def get(framework: str) -> FrameworkSpec:
    """The spec of `framework`; UnknownFrameworkError (a ValueError) names the fix."""
    try:
        return FRAMEWORKS[framework]
    except KeyError:
        raise UnknownFrameworkError(_unknown(framework)) from None


def validate(framework: str, roles: Mapping[str, int]) -> list[str]:
    """Errors for spec.framework.name and spec.replicaSpecs (role -> replicas); [] if valid."""
    if framework not in FRAMEWORKS:
        return [_unknown(framework)]
    return FRAMEWORKS[framework].validate(roles)


def wire(framework: str, inp: WiringInput) -> Wiring:
    """Dispatch to the framework's wiring; ValueError when members do not fit it."""
    return get(framework).wire(inp)
