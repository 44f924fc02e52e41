"""Runs the function an SDK `train(func, ...)` sent, in every training process of every pod
(and of the SDK's local backend). Standard library only: it is in every trainop image with
the rest of trainop.launcher.

    trainop-launch -- torchrun -m trainop.launcher.sdkrun      # the pod's command

The function travels inline, in the pod's environment: TRAINOP_SDK_FUNC holds the payload
{"v": 1, "name", "source", "kwargs", "integrations"} as JSON, zlib-compressed and base64
encoded (`encode_payload`). The SDK (trainop.sdk.functions) writes it into the
TrainingJob's pod template, so the job object is the whole record of what runs: no second
object to create first, to clean up or to lose, and `trainop render`/`kubectl get -o yaml`
show it. An environment string may hold at most 128 KiB on Linux (MAX_ARG_STRLEN), so the
payload is bounded by MAX_PAYLOAD; bigger things belong in the image or a volume.

Here the source is compiled under the name `<trainop train: NAME>` (tracebacks name it;
annotations are left unevaluated, so type hints need no imports in the pod),
the named function is taken from it, the trainer integrations the SDK detected
(trainop.integrations.transformers / .lightning) are installed, and the function is called
with the JSON keyword arguments. Its exit is the process's exit: an exception fails the
rank, which fails the pod, which the operator's restart policy handles.

Neighbours: trainop.sdk.functions builds the payload, trainop.sdk.jobs the pod command,
trainop.sdk.local runs this module as local processes.
"""

from __future__ import annotations
import __future__

import base64
import importlib
import json
import os
import sys
import zlib
from collections.abc import Mapping
from typing import Any

PAYLOAD_ENV = "TRAINOP_SDK_FUNC"
VERSION = 1
# Under Linux's MAX_ARG_STRLEN (128 KiB, one "NAME=value" string of the environment) with
# room to spare: the payload is one env string of each pod.
MAX_PAYLOAD = 96 * 1024


class PayloadError(ValueError):
    """A payload that cannot be run; the message says what is wrong with it."""


def encode_payload(
    name: str, source: str, kwargs: Mapping[str, Any], integrations: tuple[str, ...] = ()
) -> str:
    body = {
        "v": VERSION,
        "name": name,
        "source": source,
        "kwargs": dict(kwargs),
        "integrations": list(integrations),
    }
    raw = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    return base64.b64encode(zlib.compress(raw, 9)).decode("ascii")


def decode_payload(text: str) -> dict[str, Any]:
    if not text:
        raise PayloadError(f"{PAYLOAD_ENV} is empty: this process was not started by train()")
    try:
        body = json.loads(zlib.decompress(base64.b64decode(text.encode("ascii"), validate=True)))
    except (ValueError, zlib.error) as err:
        raise PayloadError(f"{PAYLOAD_ENV}: not a train() payload ({err})") from err
    if not isinstance(body, dict) or body.get("v") != VERSION:
        raise PayloadError(
            f"{PAYLOAD_ENV}: payload version {body.get('v') if isinstance(body, dict) else '?'}, "
            f"this trainop-launch runs version {VERSION}: use the same trainop on both sides"
        )
    for key, kind in (("name", str), ("source", str), ("kwargs", dict), ("integrations", list)):
        if not isinstance(body.get(key), kind):
            raise PayloadError(f"{PAYLOAD_ENV}: {key} missing or of the wrong type")
    return body


def load_function(body: Mapping[str, Any]) -> Any:
    """The function the payload names, compiled from its source in a fresh namespace."""
    name = body["name"]
    namespace: dict[str, Any] = {"__name__": "__trainop_train__"}
    # Annotations stay strings, as under `from __future__ import annotations`: the names a
    # function's hints use need not exist where it runs.
    flags = __future__.annotations.compiler_flag
    exec(compile(body["source"], f"<trainop train: {name}>", "exec", flags=flags), namespace)
    fn = namespace.get(name)
    if not callable(fn):
        raise PayloadError(f"{PAYLOAD_ENV}: the source defines no function {name!r}")
    return fn


def install_integrations(names: list[str], say: Any = print) -> list[str]:
    """Install each trainer integration the SDK detected; an image without trainop's
    integrations (or without the trainer library) costs one line, not the run."""
    done = []
    for name in names:
        try:
            module = importlib.import_module(f"trainop.integrations.{name}")
            module.install()
        except Exception as err:  # missing module or library: train without the callback
            say(f"trainop-sdk: {name} integration not installed ({err}); no trainop callback")
            continue
        done.append(name)
    return done


def run(env: Mapping[str, str]) -> Any:
    body = decode_payload(env.get(PAYLOAD_ENV, ""))
    fn = load_function(body)
    install_integrations(list(body["integrations"]), say=lambda m: print(m, file=sys.stderr))
    return fn(**body["kwargs"])


def whole_lines() -> None:
    """Each printed line reaches the log in one write. Under PYTHONUNBUFFERED (which the SDK
    sets so logs() sees lines as they are printed) print() writes the text and its newline
    in two calls; processes that share a node's log (the local backend, a pod's ranks) then
    interleave "rank 0 step 1rank 1 step 1\n\n". Line buffering flushes at each newline
    instead, so an O_APPEND write carries the whole line."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(line_buffering=True, write_through=False)


def main() -> None:
    whole_lines()
    try:
        run(os.environ)
    except PayloadError as err:
        print(f"trainop-sdk: {err}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
