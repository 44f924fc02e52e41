"""Shared pydantic configuration of every trainop API model: camelCase aliases, strict keys."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic.alias_generators import to_camel


class ApiModel(BaseModel):
    """Base of spec/status models; field descriptions become `kubectl explain` text."""

    model_config = ConfigDict(
        populate_by_name=True,
        extra="forbid",
        alias_generator=to_camel,
        validate_default=False,
    )

    def to_api(self) -> dict[str, Any]:
        """The JSON the API server stores: aliases, and no keys for unset optional fields."""
        out: dict[str, Any] = self.model_dump(by_alias=True, exclude_none=True, mode="json")
        return out


def all_errors(exc: ValidationError, prefix: str) -> list[tuple[str, str]]:
    """(field path, message) per pydantic error, paths written like `spec.replicaSpecs.Worker.gpus`."""
    out = []
    for err in exc.errors():
        path = ".".join([*([prefix] if prefix else []), *(str(x) for x in err["loc"])])
        msg = err["msg"].removeprefix("Value error, ")
        out.append((path, msg))
    return out
