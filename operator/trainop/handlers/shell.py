"""The operator process as one object: `Shell`, made once by `trainop run`, handed to the handlers.

Neighbours: `cli.run` makes it from the flags and the config file and hands it to
`handlers.operator.register`, which registers kopf's handlers as closures over it (no
handler reads a module or class attribute); `handlers.state.ShellState` (its `state`) is
everything the process knows of the cluster, one `JobMemory` per job; `handlers.scheduler`
(its `loop`), `handlers.progress` (its `progress`) and `handlers.podfeed` (its `podfeed`)
are the parts it starts. Nothing here talks to the API server.

What it holds besides those: the settings `trainop run` gave (config, namespaces, the
election and its cadence, the resync period, the progress port), the tasks it spawned (so
they are not garbage collected mid-flight), whether it is stopping, the carry-out slots,
and the operator config derived from the FabricProfile custom resources (`current_config`),
kept until either changes.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any

from trainop.handlers.podfeed import PodFeed
from trainop.handlers.progress import ProgressService
from trainop.handlers.scheduler import AdmissionLoop
from trainop.handlers.state import ShellState
from trainop.handlers.tls import TlsKeeper
from trainop.kube.client import KubeApi
from trainop.kube.lease import Elector
from trainop.planner import OperatorConfig


@dataclass(eq=False)
class Shell:
    """One operator process; see the module docstring."""

    config: OperatorConfig = field(default_factory=OperatorConfig)
    namespaces: list[str] = field(default_factory=list)  # `--namespace`; empty: cluster-wide
    elector: Elector | None = None  # `--leader-elect`
    renew_seconds: float = 2.0
    resync_seconds: float = 60.0
    progress_port: int = 0  # the report endpoint's port (`--progress-port`; 0: off)
    tls: TlsKeeper | None = None  # its certificate (`--progress-tls`; None: plain HTTP)
    state: ShellState = field(default_factory=ShellState)
    api: KubeApi | None = None  # made at start-up (kopf has logged in by then)
    loop: AdmissionLoop | None = None
    progress: ProgressService | None = None
    podfeed: PodFeed | None = None
    carry_outs: asyncio.Semaphore | None = None  # admitted gangs being created
    stopping: bool = False
    tasks: set[asyncio.Task[Any]] = field(default_factory=set)
    # (the config, the FabricProfiles) -> the config with them, while neither changes
    derived: tuple[tuple[int, tuple[Any, ...]], OperatorConfig] | None = None

    @classmethod
    def made(cls, config: OperatorConfig, **settings: Any) -> Shell:
        """The shell for `config`: its state keeps the config's topology levels."""
        return cls(config=config, state=ShellState(levels=config.topology_levels), **settings)

    def current_config(self) -> OperatorConfig:
        """The configured operator settings plus the FabricProfile custom resources (the
        same object until either changes, so its verdict memo survives from cycle to
        cycle)."""
        crs = tuple(sorted(self.state.fabrics.values(), key=lambda p: p.name))
        if not crs:
            return self.config
        key = (id(self.config), crs)
        if self.derived is None or self.derived[0] != key:
            config = dataclasses.replace(
                self.config, fabric_profiles=(*self.config.fabric_profiles, *crs), memo={}
            )
            self.derived = (key, config)
        return self.derived[1]

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        """Run `coro` as a task the shell holds until it is done."""
        task = asyncio.ensure_future(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
