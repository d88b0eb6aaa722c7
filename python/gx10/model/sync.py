"""`gx10 model sync`: run the model stage and say, per node, whether its copy is verified.

The stage is `playbooks/site.yml --tags model` (the validate play, tagged `always`, computes the
cluster plan first; then playbooks/model.yml) run through `gx10.provision.provision()`. The
figures come from the role's declared result (roles/model_sync/README.md): after each of its
`gx10.cluster.model_fetch` passes, failed or not, the role sets the fact `model_sync_result`,
`{schema: 1, pass: need|fetch|verify, failed: bool, result: {...}}`; `need` is a worker's
check-mode probe, `fetch` the fetch, `verify` each node verifying its own copy once every fetch is
done. This module reads that fact from the set_fact events, never task names or files.

The nodes that served a worker (the sync is a chain: head -> worker 1 -> worker 2 -> ..., each
worker fetching from the node before it) publish `model_sync_served` when their peer server
stops: `{schema: 1, node, head: bool, to, bytes_sent, files_sent, bytes_total}`, the server's own
count of the body bytes it sent. The report shows what the head sent against the checkpoint: about
1 x whatever the node count (a star would be N-1 x).

A node counts as verified only if its `verify` pass returned ok: a playbook that ends early, a
limit that skips the step, or events this code cannot read (another schema) all leave the node
unverified, never wrongly verified.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from gx10.provision import EventHandler, PathLike, ProvisionResult, provision

PLAYBOOK = "site.yml"
TAGS = ("model",)
CONTROLLER_HOSTS = frozenset({"localhost"})
RESULT_FACT = "model_sync_result"
"""The fact the model_sync role publishes each pass under (its README declares it)."""
RESULT_SCHEMA = 1
SERVED_FACT = "model_sync_served"
"""The fact a node publishes when its peer server stops: the bytes it sent down the chain."""
SERVED_SCHEMA = 1

Pass = Literal["need", "fetch", "verify"]
_PASSES: tuple[Pass, ...] = ("need", "fetch", "verify")


@dataclass(frozen=True, slots=True)
class FileProblem:
    """A file a node still lacks or holds wrong."""

    path: str
    status: str
    message: str


@dataclass(frozen=True, slots=True)
class NodeSync:
    """One node's totals over every model_fetch pass of the run."""

    node: str
    verified: bool
    """Its verify.yml pass returned ok."""
    files: int
    """Files in the manifest."""
    files_fetched: int
    bytes_total: int
    """Size of the checkpoint."""
    bytes_fetched: int
    """Read from the source (the head) or from the head's copy (a worker)."""
    bytes_received: int
    """Written into `.partial` files by the fetch (every attempt)."""
    bytes_hashed_receiving: int
    """Of those, hashed in the loop that wrote them: a fetched file is verified as it lands."""
    bytes_read_back: int
    """Read back from the node's own disk to hash, all passes together: resumed `.partial`
    prefixes and the verify passes' reads. A fetched file adds nothing;
    bytes_read_back / bytes_total is the sync's read amplification."""
    bytes_hashed: int
    """Read and hashed by the verify passes, all passes together (cache hits are not read, nor
    is a fetched file, hashed as it was received)."""
    bytes_cached: int
    """Vouched for by the verification cache in the node's first pass: the copy it started
    with that did not need reading (later passes mostly find the run's own work)."""
    seconds: float
    """The model_fetch passes' own wall time on the node."""
    problems: tuple[FileProblem, ...] = ()
    """What the node's last failed pass named: missing or mismatching files."""
    reason: str | None = None
    """Why the node is not verified, in one line (None when it is)."""
    extras: tuple[str, ...] = ()
    """Files in the directory that the manifest does not list (left in place)."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "verified": self.verified,
            "files": self.files,
            "files_fetched": self.files_fetched,
            "bytes_total": self.bytes_total,
            "bytes_fetched": self.bytes_fetched,
            "bytes_received": self.bytes_received,
            "bytes_hashed_receiving": self.bytes_hashed_receiving,
            "bytes_read_back": self.bytes_read_back,
            "bytes_hashed": self.bytes_hashed,
            "bytes_cached": self.bytes_cached,
            "seconds": round(self.seconds, 3),
            "reason": self.reason,
            "problems": [
                {"path": p.path, "status": p.status, "message": p.message} for p in self.problems
            ],
            "extras": list(self.extras),
        }


@dataclass(frozen=True, slots=True)
class Served:
    """What one node's peer server sent down the chain in this run."""

    node: str
    head: bool
    to: str
    """Its successor in the chain, the node that fetched from it."""
    bytes_sent: int
    files_sent: int
    bytes_total: int
    """The checkpoint's size."""

    @property
    def ratio(self) -> float:
        """Bytes sent / the checkpoint: about 1 for a node whose successor fetched everything."""
        return self.bytes_sent / self.bytes_total if self.bytes_total else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "head": self.head,
            "to": self.to,
            "bytes_sent": self.bytes_sent,
            "files_sent": self.files_sent,
            "bytes_total": self.bytes_total,
            "ratio": round(self.ratio, 4),
        }


@dataclass(frozen=True, slots=True)
class SyncResult:
    run: ProvisionResult
    nodes: tuple[NodeSync, ...]
    """Every node the run touched, sorted by name."""
    served: tuple[Served, ...] = ()
    """The nodes whose peer server ran (a worker fetched from them), sorted by name."""

    @property
    def head_served(self) -> Served | None:
        """What the head sent, if its peer server ran."""
        return next((s for s in self.served if s.head), None)

    @property
    def ok(self) -> bool:
        """The playbook succeeded and every node it ran on verified its copy."""
        return self.run.ok and bool(self.nodes) and all(n.verified for n in self.nodes)

    @property
    def unverified(self) -> tuple[NodeSync, ...]:
        return tuple(n for n in self.nodes if not n.verified)

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "unverified": [n.node for n in self.unverified],
            "nodes": {n.node: n.to_dict() for n in self.nodes},
            "sent": {s.node: s.to_dict() for s in self.served},
            "run": self.run.to_dict(),
        }


def sync(
    inventory: PathLike,
    *,
    reverify: bool = False,
    limit: str | None = None,
    on_event: EventHandler | None = None,
    artifact_dir: PathLike | None = None,
) -> SyncResult:
    """Run the model stage against `inventory` and gather each node's totals.

    `reverify` sets the role's `model_sync_reverify` (as an extra variable, so it wins over the
    inventory): every file is hashed again, ignoring the verification caches.
    """
    collector = SyncEvents(on_event)
    run = provision(
        inventory,
        PLAYBOOK,
        limit=limit,
        tags=list(TAGS),
        extravars={"model_sync_reverify": True} if reverify else None,
        on_event=collector,
        artifact_dir=artifact_dir,
    )
    return collector.result(run)


@dataclass
class _Outcome:
    failed: bool
    res: Mapping[str, Any]


@dataclass
class _Node:
    passes: dict[Pass, _Outcome] = field(default_factory=dict)
    last_failed: _Outcome | None = None


class SyncEvents:
    """An `on_event` handler that keeps the model_fetch results, then forwards the event."""

    def __init__(self, on_event: EventHandler | None = None) -> None:
        self._on_event = on_event
        self._nodes: dict[str, _Node] = {}
        self._served: dict[str, Served] = {}

    def __call__(self, event: dict[str, Any]) -> None:
        self._record(event)
        if self._on_event is not None:
            self._on_event(event)

    def _record(self, event: Mapping[str, Any]) -> None:
        served = read_served(event)
        if served is not None:
            self._served[served.node] = served
        published = read_result(event)
        if published is None:
            return
        host, kind, outcome = published
        node = self._nodes.setdefault(host, _Node())
        node.passes[kind] = outcome
        if outcome.failed:
            node.last_failed = outcome

    def result(self, run: ProvisionResult) -> SyncResult:
        # The controller's plays (validate) run on localhost: it is not a node unless it ran the
        # role's tasks.
        hosts = {h for h in run.hosts if h not in CONTROLLER_HOSTS}
        names = sorted(hosts | set(self._nodes))
        served = tuple(self._served[name] for name in sorted(self._served))
        return SyncResult(run, tuple(self._node(name, run) for name in names), served)

    def _node(self, name: str, run: ProvisionResult) -> NodeSync:
        node = self._nodes.get(name, _Node())
        results = [node.passes[k].res for k in _PASSES if k in node.passes]
        first = results[0] if results else {}
        fetch = node.passes.get("fetch")
        final = node.passes.get("verify")
        verified = final is not None and not final.failed and final.res.get("ok") is True
        last = final or fetch or node.passes.get("need")
        problems: tuple[FileProblem, ...] = ()
        if node.last_failed is not None and not verified:
            problems = _problems(node.last_failed.res)
        return NodeSync(
            node=name,
            verified=verified,
            files=max((_int(r, "files_total") for r in results), default=0),
            files_fetched=_int(fetch.res, "files_fetched") if fetch else 0,
            bytes_total=max((_int(r, "bytes_total") for r in results), default=0),
            bytes_fetched=_int(fetch.res, "bytes_from_source") if fetch else 0,
            bytes_received=_int(fetch.res, "bytes_received") if fetch else 0,
            bytes_hashed_receiving=_int(fetch.res, "bytes_hashed_receiving") if fetch else 0,
            bytes_read_back=sum(_int(r, "bytes_read_back") for r in results),
            bytes_hashed=sum(_int(r, "bytes_hashed") for r in results),
            bytes_cached=_int(first, "bytes_cached"),
            seconds=sum(_float(r, "seconds") for r in results),
            problems=problems,
            reason=None if verified else _reason(name, node, run),
            extras=_extras(last.res) if last else (),
        )


def read_result(event: Mapping[str, Any]) -> tuple[str, Pass, _Outcome] | None:
    """(host, pass, outcome) of a runner event that sets the role's `model_sync_result`, if any."""
    if event.get("event") != "runner_on_ok":
        return None
    data = event.get("event_data")
    if not isinstance(data, Mapping):
        return None
    host, res = data.get("host"), data.get("res")
    facts = res.get("ansible_facts") if isinstance(res, Mapping) else None
    published = facts.get(RESULT_FACT) if isinstance(facts, Mapping) else None
    if not isinstance(host, str) or not isinstance(published, Mapping):
        return None
    kind, result = published.get("pass"), published.get("result")
    if published.get("schema") != RESULT_SCHEMA or kind not in _PASSES:
        return None
    if not isinstance(result, Mapping):
        return None
    failed = published.get("failed") is not False  # anything but a plain "no" counts as failed
    pass_name: Pass = kind
    return host, pass_name, _Outcome(failed=failed, res=result)


def read_served(event: Mapping[str, Any]) -> Served | None:
    """A node's `model_sync_served`, from the set_fact event that publishes it, if any. The node
    is the fact's own `node`: the task runs delegated to it, from a worker's event."""
    if event.get("event") != "runner_on_ok":
        return None
    data = event.get("event_data")
    res = data.get("res") if isinstance(data, Mapping) else None
    facts = res.get("ansible_facts") if isinstance(res, Mapping) else None
    fact = facts.get(SERVED_FACT) if isinstance(facts, Mapping) else None
    if not isinstance(fact, Mapping) or fact.get("schema") != SERVED_SCHEMA:
        return None
    node, to = fact.get("node"), fact.get("to")
    if not isinstance(node, str) or not node:
        return None
    return Served(
        node=node,
        head=fact.get("head") is True,
        to=to if isinstance(to, str) else "",
        bytes_sent=_int(fact, "bytes_sent"),
        files_sent=_int(fact, "files_sent"),
        bytes_total=_int(fact, "bytes_total"),
    )


def _reason(name: str, node: _Node, run: ProvisionResult) -> str:
    if node.last_failed is not None:
        res = node.last_failed.res
        return str(res.get("msg") or "the model_fetch task failed")
    failed_here = [t for t in run.failed_tasks if t.host == name]
    if failed_here:
        task = failed_here[0]
        return f"task '{task.task}' failed: {task.message}"
    if run.status == "canceled":
        return "the run was interrupted before this node was verified"
    if "verify" in node.passes:
        return "its verify step did not report ok"
    elsewhere = run.failed_tasks[0] if run.failed_tasks else None
    if elsewhere is not None:
        return f"not verified: the run stopped after '{elsewhere.task}' failed on {elsewhere.host}"
    return f"not verified: the run ended without its verify step (status={run.status})"


def _problems(res: Mapping[str, Any]) -> tuple[FileProblem, ...]:
    return tuple(
        FileProblem(str(f.get("path")), str(f.get("status")), str(f.get("message")))
        for f in _list(res, "failures")
        if isinstance(f, Mapping)
    )


def _extras(res: Mapping[str, Any]) -> tuple[str, ...]:
    return tuple(str(e.get("path")) for e in _list(res, "extras") if isinstance(e, Mapping))


def _int(res: Mapping[str, Any], key: str) -> int:
    value = res.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _float(res: Mapping[str, Any], key: str) -> float:
    value = res.get(key)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


def _list(res: Mapping[str, Any], key: str) -> list[Any]:
    value = res.get(key)
    return value if isinstance(value, list) else []
