"""Shared shapes of framework wiring: members in, env/files/ports out, and role validation.

Neighbours: the planner builds a `WiringInput` from the job and the placement (which
chose each GPU member's rank) and turns the returned `Wiring` into pod env, the
`<job>-config` ConfigMap, container ports and commands. Each framework module
(`pytorch`, `tensorflow`, ...) defines one `FrameworkSpec` over these types. Pure data,
no I/O.
"""

from __future__ import annotations

import difflib
import hashlib
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace

from trainop.api import constants as c

# Where the `<job>-config` ConfigMap (Wiring.config_files) is mounted in every pod.
CONFIG_MOUNT_PATH = "/etc/trainop"

MemberKey = tuple[str, int]


def pod_name(job: str, role: str, index: int) -> str:
    """`<job>-<role>-<index>` with the role lower-cased (DESIGN.md)."""
    return f"{job}-{role.lower()}-{index}"


def gang_has_service(pods: int, elastic: bool, host_network: bool = False) -> bool:
    """Whether the gang gets the headless Service `<job>` that gives its pods DNS names.

    A gang of several pods needs it: a pod's name resolves from another pod only through a
    Service (https://kubernetes.io/docs/concepts/services-networking/dns-pod-service/#pod-s-hostname-and-subdomain-fields).
    An elastic gang gets it at every size, one pod included: it grows without its first
    pods being recreated, and their rendezvous endpoint must stay the same name. A fixed
    gang of one pod needs none (one API write less per job): it reaches itself through its
    own hostname, see `member_host`; unless it runs on the host's network, where the
    hostname is the node's and /etc/hosts is the node's too, so the Service's name (with
    `dnsPolicy: ClusterFirstWithHostNet`) is the one that resolves.
    """
    return pods > 1 or elastic or host_network


def member_host(job: str, namespace: str, role: str, index: int, *, served: bool) -> str:
    """The name every address trainop writes into a pod uses for one member of the gang.

    served (`gang_has_service`): `<pod>.<job>.<namespace>.svc`, which the cluster DNS answers
    through the headless Service `<job>` (the resolver's `cluster.local` search domain
    completes it). Not served (a fixed one-pod gang): the pod's own hostname, which the
    kubelet writes into the pod's /etc/hosts (`<hostname>` and the full
    `<hostname>.<subdomain>.<namespace>.svc.<cluster domain>`, but never the `.svc` name
    without the cluster domain, which only DNS completes:
    https://kubernetes.io/docs/tasks/network/customize-hosts-file-for-pods/). Issue 38: a
    one-pod job given the `.svc` name with no Service behind it hung in torchrun's store.
    """
    name = pod_name(job, role, index)
    return f"{name}.{job}.{namespace}.svc" if served else name


# A host name as it appears in an env value or a config file: `h`, `h:port`, `h slots=2`,
# `"h:2222"` in TF_CONFIG's JSON, `h:p,h:p` in Paddle's endpoints.
_HOST_TOKEN = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?")


def hosts_named(
    texts: Iterable[str], job: str, namespace: str, roles: Iterable[str]
) -> tuple[str, ...]:
    """The gang's host names (`member_host` of any of `roles`, either form) that appear in
    `texts` (env values, config files) as whole names, sorted: what a pod must be able to
    resolve. `x-worker-1` is not found inside `x-worker-10`."""
    alts = "|".join(re.escape(r.lower()) for r in sorted(roles))
    member = re.compile(
        rf"{re.escape(job)}-(?:{alts})-\d+(?:\.{re.escape(job)}\.{re.escape(namespace)}\.svc)?"
    )
    found = {t for text in texts for t in _HOST_TOKEN.findall(text) if member.fullmatch(t)}
    return tuple(sorted(found))


def config_map_name(job: str) -> str:
    """The ConfigMap holding `Wiring.config_files`, mounted at CONFIG_MOUNT_PATH."""
    return f"{job}-config"


def ssh_secret_name(job: str, uid: str) -> str:
    """The Secret with the job's SSH keypair when `Wiring.needs_ssh` (the kube layer makes it).

    `<job>-ssh-<8 hex of the job's uid>`: a job recreated under the same name, or anyone's
    Secret called `<job>-ssh`, can never hand a job another object's keys, and the operator
    needs no right to read Secrets back to be sure (an existing one of this name is its own).
    """
    return f"{job}-ssh-{hashlib.sha256(uid.encode()).hexdigest()[:8]}"


def config_path(name: str) -> str:
    """Path inside the pod of one of `Wiring.config_files`."""
    return f"{CONFIG_MOUNT_PATH}/{name}"


@dataclass(frozen=True)
class Member:
    """One pod of the job as the wiring sees it.

    role:  as written in spec.replicaSpecs ("Worker", "Chief", "Launcher", ...).
    index: the replica index in the pod name.
    rank:  the global rank order placement chose for GPU members; None for members
           outside the collective. Only the order among a framework's ranked roles is
           used (see ranked_members); ranks given to other roles are ignored.
    gpus:  GPUs of this pod; 0 means a CPU pod.
    host:  `member_host(job, namespace, role, index, served=...)`: the name the other
           members' addresses use for this one.
    """

    role: str
    index: int
    rank: int | None
    gpus: int
    host: str

    @property
    def key(self) -> MemberKey:
        return (self.role, self.index)

    @property
    def procs(self) -> int:
        """Processes this pod runs: one per GPU, one on a CPU pod."""
        return max(self.gpus, 1)


@dataclass(frozen=True)
class WiringInput:
    """Everything a framework needs to wire one gang of pods.

    port: the rendezvous/coordinator port. The planner passes the framework's
    `FrameworkSpec.default_port` (or a user override); 29500 is torchrun's default.
    elastic: (minReplicas, maxReplicas) of an elastic job (spec.elastic), else None: the
    members are then one size of several, and the env must not depend on the count.
    last_call_seconds: spec.elastic.rendezvousLastCallSeconds (torchrun's default when None).
    """

    job: str
    namespace: str
    members: tuple[Member, ...]
    port: int = c.DEFAULT_MASTER_PORT
    elastic: tuple[int, int] | None = None
    last_call_seconds: int | None = None

    def of_role(self, role: str) -> tuple[Member, ...]:
        """Members of one role by replica index (for roles whose order is not a rank)."""
        return tuple(sorted((m for m in self.members if m.role == role), key=lambda m: m.index))


@dataclass(frozen=True)
class Wiring:
    """What the planner adds to the generated objects for one framework.

    env:             per member (role, index), the env vars to set; one entry per member,
                     ordered by (role, index), each mapping ordered by name.
    config_files:    file name -> content for the ConfigMap `config_map_name(job)`,
                     mounted at CONFIG_MOUNT_PATH in every pod (e.g. the MPI hostfile).
    container_ports: per role present in the job, the ports its container listens on.
    needs_ssh:       the job needs the SSH keypair Secret `ssh_secret_name(job, uid)` mounted
                     in every pod (MPI: mpirun starts remote ranks over ssh).
    command_for:     per role, a wrapper prepended to the user's container command: the
                     container runs `command_for[role] + user command + user args`, so the
                     wrapper ends with `exec "$@"`. None when no role needs one.
    """

    env: Mapping[MemberKey, Mapping[str, str]]
    config_files: Mapping[str, str] = field(default_factory=dict)
    container_ports: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    needs_ssh: bool = False
    command_for: Mapping[str, tuple[str, ...]] | None = None


def ordered_env(env: Mapping[MemberKey, Mapping[str, str]]) -> dict[MemberKey, dict[str, str]]:
    """Order members by (role, index) and names alphabetically, so output is byte-stable."""
    return {k: dict(sorted(env[k].items())) for k in sorted(env)}


def ports_for(inp: WiringInput, ports: Mapping[str, tuple[int, ...]]) -> dict[str, tuple[int, ...]]:
    """Ports per role, for the roles present in this job only, ordered by role."""
    present = {m.role for m in inp.members}
    return {role: ports.get(role, ()) for role in sorted(present)}


def ranked_members(inp: WiringInput, roles: tuple[str, ...]) -> tuple[Member, ...]:
    """Members of `roles` in rank order, each with its rank renumbered 0..N-1.

    Placement chose the ranks (topology order), so the order here is Member.rank and
    never the replica index. Only the order matters: placement may also rank GPU pods
    of roles outside the collective (a GPU evaluator), leaving gaps, so positions are
    renumbered densely. When no member of `roles` has a rank yet (nothing placed) the
    order falls back to the order of `roles`, then index. Some ranked and some not, or
    two members on one rank, is a planner bug.
    """
    members = [m for m in inp.members if m.role in roles]
    if all(m.rank is None for m in members):
        members.sort(key=lambda m: (roles.index(m.role), m.index))
    else:
        unranked = sorted(f"{m.role}-{m.index}" for m in members if m.rank is None)
        if unranked:
            raise ValueError(f"members {', '.join(unranked)} have no rank while others do")
        counts = Counter(m.rank for m in members)
        dups = sorted(r for r, n in counts.items() if r is not None and n > 1)
        if dups:
            raise ValueError(f"several {'/'.join(roles)} members share rank {dups}")
        members.sort(key=lambda m: m.rank if m.rank is not None else -1)
    return tuple(replace(m, rank=r) for r, m in enumerate(members))


def _join(names: Iterable[str]) -> str:
    return ", ".join(sorted(names))


@dataclass(frozen=True)
class FrameworkSpec:
    """The rules and wiring of one framework.

    roles:         roles allowed in spec.replicaSpecs.
    required:      roles that must be present (with at least min_replicas).
    ranked:        roles in the collective, ordered by the rank placement gave them (in
                   this role order when nothing is placed yet). Other roles may still ask
                   for GPUs; a rank placement gives them is ignored.
    min_replicas:  lowest replica count per role when present (default 1 for required
                   roles, 0 otherwise).
    max_replicas:  highest replica count per role (absent: unbounded).
    default_port:  the port the planner passes as WiringInput.port unless overridden.
    purpose:       what a role is for, used in error messages.
    """

    name: str
    roles: tuple[str, ...]
    required: tuple[str, ...]
    ranked: tuple[str, ...]
    default_port: int
    wire_fn: Callable[[WiringInput], Wiring] = field(repr=False, compare=False)
    min_replicas: Mapping[str, int] = field(default_factory=dict)
    max_replicas: Mapping[str, int] = field(default_factory=dict)
    purpose: Mapping[str, str] = field(default_factory=dict)

    def min_for(self, role: str) -> int:
        return self.min_replicas.get(role, 1 if role in self.required else 0)

    def validate(self, roles: Mapping[str, int]) -> list[str]:
        """Error sentences, each naming `spec.replicaSpecs.<Role>` and the fix; [] if valid.

        `roles` maps each role written in spec.replicaSpecs to its replica count.
        """
        errors: list[str] = []
        for role in sorted(roles):
            if role not in self.roles:
                errors.append(self._unknown_role(role))
            elif roles[role] < 0:
                errors.append(
                    f"spec.replicaSpecs.{role}.replicas: must not be negative, got "
                    f"{roles[role]}; set it to {max(self.min_for(role), 1)} or more."
                )
        for role in self.roles:
            n = roles.get(role)
            if n is None or n < 0:
                if n is None and role in self.required:
                    errors.append(self._missing(role))
                continue
            lo, hi = self.min_for(role), self.max_replicas.get(role)
            if n < lo:
                errors.append(
                    f"spec.replicaSpecs.{role}.replicas: {self.name} needs "
                    f"{self._count(role, lo, hi)}, got {n}; set replicas: {lo}"
                    f"{'' if lo == hi else ' or more'}."
                )
            elif hi is not None and n > hi:
                errors.append(
                    f"spec.replicaSpecs.{role}.replicas: {self.name} allows "
                    f"{self._count(role, lo, hi) if lo == hi else f'at most {hi} {role}'}, "
                    f"got {n}; set replicas: {hi}{self._overflow_hint(role)}."
                )
        return errors

    def wire(self, inp: WiringInput) -> Wiring:
        """Check the members fit this framework's roles, then wire them."""
        unknown = sorted({m.role for m in inp.members} - set(self.roles))
        if unknown:
            allowed = _join(self.roles)
            raise ValueError(f"{self.name} has no role {_join(unknown)}; allowed: {allowed}")
        counts = Counter(m.key for m in inp.members)
        dups = sorted(f"{r}-{i}" for (r, i), n in counts.items() if n > 1)
        if dups:
            raise ValueError(f"duplicate members {', '.join(dups)}")
        return self.wire_fn(inp)

    def _count(self, role: str, lo: int, hi: int | None) -> str:
        if lo == hi:
            return f"exactly {lo} {role}"
        return f"at least {lo} {role}"

    def _what(self, role: str) -> str:
        purpose = self.purpose.get(role)
        return f" ({purpose})" if purpose else ""

    def _missing(self, role: str) -> str:
        lo, hi = self.min_for(role), self.max_replicas.get(role)
        want = f"replicas: {lo}" if lo == hi else f"replicas >= {lo}"
        article = "exactly one" if lo == hi == 1 else "a"
        return (
            f"spec.replicaSpecs.{role}: {self.name} requires {article} {role}{self._what(role)}; "
            f"add spec.replicaSpecs.{role} with {want}."
        )

    def _unknown_role(self, role: str) -> str:
        by_lower = {r.lower(): r for r in self.roles}
        close = difflib.get_close_matches(role, self.roles, n=1)
        if role.lower() in by_lower:
            fix = f"rename it to {by_lower[role.lower()]} (role names are case-sensitive)"
        elif close:
            fix = f"did you mean {close[0]}? {self.name} roles are {_join(self.roles)}"
        else:
            fix = f"remove it or use one of {_join(self.roles)}"
        return f"spec.replicaSpecs.{role}: {role!r} is not a role of {self.name}; {fix}."

    def _overflow_hint(self, role: str) -> str:
        # A second Chief is almost always meant as one more worker.
        if role == "Chief" and "Worker" in self.roles:
            return " and put the other replicas under spec.replicaSpecs.Worker"
        return ""
