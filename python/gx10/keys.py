"""`gx10 keys init|add|limit|list|revoke|usage -i INV`: the API gateway's keys (roles/api_gateway).

`init` makes the inventory's own service key (the engine's, and the one the pipeline's checks
send), here on the controller: INV/.secrets/service.key, mode 0600, in a directory of mode 0700
whose own .gitignore keeps it out of git. inventories/gx10 reads it with a file lookup, so no key
is ever written in an inventory. Run again, it keeps the key (exit 0); a key file that others
can read, or an empty one, is refused naming the fix. To rotate it: remove the file, init,
converge (the engine and the gateway take the new key).

`add` makes a key here, on the controller, from the operating system's CSPRNG
(`secrets.token_urlsafe`: 32 random bytes, 256 bits), and sends the head only its SHA-256
(playbooks/keys.yml, an extra variable); the key itself never reaches Ansible, so it is in no
log, no runner artifact and no process's arguments. It is shown once: alone on stdout (so
`gx10 keys add alice -i INV > alice.key` keeps it), or written to `--key-file` (mode 0600,
never over an existing file). A refused name (taken, reserved, invalid) changes nothing and
prints no key. `add --max-concurrent N` gives the key its own limit of requests in flight at
once (else the gateway's default, api_gateway_max_concurrent; 0 is none); `limit NAME N`
changes it later (`default` gives it back). A request over its key's limit gets 429 with
Retry-After and never reaches the engine. `revoke` removes a key by name; the running gateway
refuses it from the next request, and nothing restarts. `list` shows names, creation times,
hash prefixes and limits. `usage` sums the gateway's access log per key: requests (served,
limited, failed) and the tokens the responses reported.

Exit codes: 0 done; 1 a bad option (nothing ran); 2 the playbook refused or failed (nothing
changed: the message says why).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import secrets
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from gx10 import _collection
from gx10.errors import Gx10Error
from gx10.progress import ProgressPrinter, RunStatus
from gx10.provision import EventHandler, ProvisionResult, provision

PLAYBOOK = "keys.yml"
KEY_PREFIX = "gx10-"  # tells a secret scanner, and a person, what the string is
KEY_BYTES = 32
MODULE_ACTIONS = ("gx10.cluster.gateway_keys", "gateway_keys")
USAGE_ACTIONS = ("gx10.cluster.gateway_usage", "gateway_usage")
DEFAULT_LIMIT = "default"  # `gx10 keys limit NAME default`: the gateway's default again
EXIT_OK, EXIT_ERROR, EXIT_FAILED = 0, 1, 2


class KeysError(Gx10Error):
    """A bad option for `gx10 keys`, found before anything runs."""


def generate_key() -> str:
    """A new key: `gx10-` and 32 bytes from the OS's CSPRNG, URL-safe base64 (43 characters)."""
    return KEY_PREFIX + secrets.token_urlsafe(KEY_BYTES)


def key_sha256(key: str) -> str:
    """What the gateway compares: the key's SHA-256 in lower-case hex (HAProxy's
    `sha2(256),hex,lower` of the header's value)."""
    return hashlib.sha256(key.encode()).hexdigest()


def check_name(name: str) -> None:
    """Refuse a name the gateway would refuse, before anything runs."""
    error = _collection.load("gateway_keys").name_error(name)
    if error:
        raise KeysError(error)


def max_concurrent(text: str) -> int:
    """`--max-concurrent N`'s value (argparse type): refused, naming the fix, before anything
    runs."""
    try:
        value: object = int(text)
    except ValueError:
        value = text
    error = _collection.load("gateway_keys").max_concurrent_error(value)
    if error:
        raise argparse.ArgumentTypeError(error)
    return int(text)


def limit_value(text: str) -> int | None:
    """`gx10 keys limit NAME N|default`: a limit, or None for the gateway's default."""
    return None if text == DEFAULT_LIMIT else max_concurrent(text)


@dataclass(frozen=True, slots=True)
class KeysRun:
    """What the head's gateway_keys task reported, and the run."""

    run: ProvisionResult
    keys: tuple[Mapping[str, Any], ...] = ()
    running: bool = False
    runtime: tuple[str, ...] = ()
    module_msg: str = field(default="")
    usage: Mapping[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.run.ok

    def problem(self) -> str:
        """Why the run failed, in the module's words where it spoke."""
        if self.module_msg:
            return self.module_msg
        reasons = [f"{t.host}: {t.task}: {t.message}" for t in self.run.failed_tasks]
        return "; ".join(reasons) or f"the playbook run {self.run.status}"


class _Collector:
    """The ansible-runner event handler: picks the gateway_keys or gateway_usage task's result."""

    def __init__(self, forward: EventHandler | None) -> None:
        self.forward = forward
        self.result: Mapping[str, Any] | None = None
        self.usage: Mapping[str, Any] | None = None
        self.failed = False

    def __call__(self, event: dict[str, Any]) -> None:
        data = event.get("event_data") or {}
        kind = event.get("event")
        action = data.get("task_action")
        if kind in ("runner_on_ok", "runner_on_failed") and action in (
            *MODULE_ACTIONS,
            *USAGE_ACTIONS,
        ):
            res = data.get("res")
            if isinstance(res, Mapping):
                if action in USAGE_ACTIONS:
                    self.usage = res
                else:
                    self.result = res
                self.failed = kind == "runner_on_failed"
        if self.forward is not None:
            self.forward(event)


def run_keys(
    inventory: str,
    action: str,
    *,
    name: str | None = None,
    sha256: str | None = None,
    limit: int | None = None,
    since: str | None = None,
    on_event: EventHandler | None = None,
) -> KeysRun:
    """playbooks/keys.yml with `action` (add, revoke, limit, list, usage): the head's answer.
    `limit` None leaves a new key on (or gives a key back) the gateway's default."""
    extravars: dict[str, Any] = {"api_gateway_key_action": action}
    if name is not None:
        extravars["api_gateway_key_name"] = name
    if sha256 is not None:
        extravars["api_gateway_key_sha256"] = sha256
    if limit is not None:
        extravars["api_gateway_key_max_concurrent"] = limit
    if since is not None:
        extravars["api_gateway_usage_since"] = since
    collector = _Collector(on_event)
    run = provision(inventory, PLAYBOOK, extravars=extravars, on_event=collector)
    res = collector.result or collector.usage or {}
    return KeysRun(
        run=run,
        keys=tuple(k for k in res.get("keys") or () if isinstance(k, Mapping)),
        running=bool(res.get("running")),
        runtime=tuple(str(line) for line in res.get("runtime") or ()),
        module_msg=str(res.get("msg") or "") if collector.failed else "",
        usage=dict(collector.usage or {}),
    )


# --- the command -------------------------------------------------------------------------------


def add_parser(commands: Any, json_option: argparse.ArgumentParser) -> None:
    keys = commands.add_parser(
        "keys",
        help="per-user API keys for the gateway in front of the engine: add, list, revoke",
        description=(
            "Manage the API gateway's keys (gx10_gateway_enabled; roles/api_gateway). Keys are "
            "made here and shown once; the head stores only their SHA-256; a change counts from "
            "the next request, nothing restarts."
        ),
    )
    actions = keys.add_subparsers(title="actions", metavar="ACTION", required=True)

    def action(
        name: str, handler: Any, help_text: str, description: str, *, named: str = "", runs: bool
    ) -> argparse.ArgumentParser:
        """One action: its NAME argument (when `named` describes it), -i, and -v when it runs
        the playbook."""
        parser: argparse.ArgumentParser = actions.add_parser(
            name, parents=[json_option], help=help_text, description=description
        )
        if named:
            parser.add_argument("name", metavar="NAME", help=named)
        parser.add_argument("-i", "--inventory", required=True, help="inventory file or directory")
        if runs:
            parser.add_argument(
                "-v", "--verbose", action="store_true", help="show the playbook's progress"
            )
        parser.set_defaults(handler=handler)
        return parser

    action(
        "init",
        _run_init,
        "make the inventory's service key (INV/.secrets/service.key, 0600), once",
        "Make the inventory's own service key (256 bits from the OS's CSPRNG) in "
        f"INV/{SERVICE_KEY_FILE}, mode 0600, in a directory git ignores. The inventory reads it "
        "with a file lookup (inventories/gx10 does). An existing key is kept.",
        runs=False,
    )
    add = action(
        "add",
        _run_add,
        "make a key for NAME and show it once",
        "Make a key (256 bits from the OS's CSPRNG) and register its hash as NAME. The key is "
        "printed once, alone on stdout, or written to --key-file (mode 0600). A name already "
        "taken is refused and nothing changes.",
        named="the key's name, as the access log shows it",
        runs=True,
    )
    add.add_argument(
        "--max-concurrent",
        type=max_concurrent,
        metavar="N",
        help="the key's own limit of requests in flight at once (0: none); without it, the "
        "gateway's default (api_gateway_max_concurrent, 4) counts. One more gets 429 with "
        "Retry-After",
    )
    add.add_argument(
        "--key-file",
        type=Path,
        metavar="F",
        help="write the key to F (created with mode 0600; an existing F is refused) instead of "
        "printing it",
    )
    action(
        "revoke",
        _run_revoke,
        "revoke NAME's key (refused from the next request)",
        "Remove NAME's key; the running gateway refuses it from the next request.",
        named="the key's name",
        runs=True,
    )
    limit = action(
        "limit",
        _run_limit,
        "set NAME's limit of requests in flight at once (from the next request)",
        "Give NAME's key its own limit of requests in flight at once: N (1 to 4096), 0 for "
        "none, or `default` for the gateway's (api_gateway_max_concurrent). The running gateway "
        "counts it from the next request; nothing restarts.",
        named="the key's name",
        runs=True,
    )
    limit.add_argument(
        "limit", metavar="N", type=limit_value, help="requests at once, 0 for none, or default"
    )
    action(
        "list",
        _run_list,
        "the keys: names, creation times, hash prefixes, limits",
        "List the gateway's keys: name, when it was added, its hash's first digits, its limit "
        "of requests in flight (`default`: the gateway's).",
        runs=True,
    )
    usage = action(
        "usage",
        _run_usage,
        "requests and tokens per key, from the gateway's access log",
        "Sum the gateway's access log (the head's journal) per key: requests served, limited "
        "(429) and failed, and the prompt and completion tokens the responses reported (a chat "
        "stream reports them only when its client asks, with stream_options.include_usage; "
        "`counted` says how many did). Requests without a known key (401) show as `-`.",
        runs=True,
    )
    usage.add_argument(
        "--since",
        metavar="WHEN",
        help="only from WHEN on, as journalctl's --since takes it (--since=-24h, '24h ago', "
        "2026-12-01, yesterday); default: all the journal holds",
    )


def _events(err: Console, args: argparse.Namespace) -> contextlib.AbstractContextManager[Any]:
    if args.verbose:
        return contextlib.nullcontext(ProgressPrinter(err))
    return RunStatus(err, "gx10 keys")


# Where validation tells a user to keep it, and how an inventory reads it (cluster_plan's).
_PLAN = _collection.load("cluster_plan")
SERVICE_KEY_FILE: str = _PLAN.SERVICE_KEY_FILE
LOOKUP = f'{_PLAN.SERVICE_KEY_VAR}: "{_PLAN.SERVICE_KEY_LOOKUP}"'
SECRETS_IGNORE = "# gx10 keys init: nothing here goes into git.\n*\n"


@dataclass(frozen=True, slots=True)
class ServiceKey:
    """Where `gx10 keys init` keeps the inventory's service key, and whether it made it now."""

    path: Path
    created: bool


def init_service_key(inventory: str | os.PathLike[str]) -> ServiceKey:
    """The inventory's service key file, made (0600, from the CSPRNG) if it is not there yet.

    Raises KeysError, changing nothing, for an inventory that does not exist, or a key file that
    is empty or readable by others (it would be used as it is, or would leak)."""
    where = Path(inventory)
    if not where.exists():
        raise KeysError(f"-i {inventory}: no such inventory file or directory")
    root = where if where.is_dir() else where.parent
    path = root / SERVICE_KEY_FILE
    if path.exists():
        return ServiceKey(_usable(path), created=False)
    path.parent.mkdir(mode=0o700, exist_ok=True)
    ignore = path.parent / ".gitignore"
    if not ignore.exists():
        ignore.write_text(SECRETS_IGNORE, encoding="utf-8")
    # Written whole under a temporary name, then linked into place: a reader (another init, a
    # lookup) sees no key file or a whole one, and of two inits at once one key wins.
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    with _reserved(temporary, "the service key") as handle:
        handle.write(generate_key() + "\n")
        handle.flush()
        os.fsync(handle.fileno())
    try:
        os.link(temporary, path)
    except FileExistsError:
        return ServiceKey(_usable(path), created=False)  # another init made it meanwhile
    finally:
        temporary.unlink()
    return ServiceKey(path, created=True)


def _usable(path: Path) -> Path:
    """`path`, a service key file that is safe to use; KeysError naming the fix if not."""
    mode = path.stat().st_mode & 0o777
    if mode & 0o077:
        raise KeysError(
            f"{path} has mode {mode:04o}: others can read the service key; restrict it "
            f"(chmod 600 {path}), or rotate it: remove the file, run gx10 keys init again "
            "and converge"
        )
    if not path.read_text(encoding="utf-8").strip():
        raise KeysError(f"{path} is empty: remove it and run gx10 keys init again")
    return path


def _run_init(args: argparse.Namespace) -> int:
    made = init_service_key(args.inventory)
    if args.json:
        print(json.dumps({"path": str(made.path), "created": made.created}, indent=2))
        return EXIT_OK
    if made.created:
        print(
            f"wrote the service key to {made.path} (0600; git ignores its directory). An "
            f"inventory reads it with\n  {LOOKUP}\n(inventories/gx10 does); converge to use it."
        )
    else:
        print(f"kept the service key in {made.path}: it is there already (0600).")
    return EXIT_OK


def _run_add(args: argparse.Namespace) -> int:
    err = Console(stderr=True, highlight=False)
    check_name(args.name)
    key = generate_key()
    with _reserved(args.key_file) as key_file, _events(err, args) as on_event:
        result = run_keys(
            args.inventory,
            "add",
            name=args.name,
            sha256=key_sha256(key),
            limit=args.max_concurrent,
            on_event=on_event,
        )
        if not result.ok:
            return _failed(err, f"key {args.name!r} not added: {result.problem()}", result)
        if key_file is not None:
            key_file.write(key + "\n")
    entry = next((k for k in result.keys if k.get("name") == args.name), {})
    if args.json:
        document = {**_entry(entry, args.name), **_runtime(result)}
        if args.key_file is None:
            document["key"] = key
        else:
            document["key_file"] = str(args.key_file)
        print(json.dumps(document, indent=2))
        return EXIT_OK
    where = f"written to {args.key_file} (0600)" if args.key_file else "on stdout, shown once"
    err.print(
        f"added key {args.name} (sha256 {entry.get('sha256_prefix', '?')}..., "
        f"{_limit_words(entry.get('max_concurrent'))}); the key is {where}. "
        f"{_runtime_sentence(result, 'accepts it')}",
        soft_wrap=True,  # one line, for the terminal to wrap (and a script to match)
    )
    if args.key_file is None:
        print(key)
    return EXIT_OK


def _run_revoke(args: argparse.Namespace) -> int:
    err = Console(stderr=True, highlight=False)
    check_name(args.name)
    with _events(err, args) as on_event:
        result = run_keys(args.inventory, "revoke", name=args.name, on_event=on_event)
    if not result.ok:
        return _failed(err, f"key {args.name!r} not revoked: {result.problem()}", result)
    if args.json:
        print(json.dumps({"name": args.name, "revoked": True, **_runtime(result)}, indent=2))
    else:
        print(f"revoked key {args.name}. {_runtime_sentence(result, 'refuses it')}")
    return EXIT_OK


def _run_limit(args: argparse.Namespace) -> int:
    err = Console(stderr=True, highlight=False)
    check_name(args.name)
    with _events(err, args) as on_event:
        result = run_keys(
            args.inventory, "limit", name=args.name, limit=args.limit, on_event=on_event
        )
    if not result.ok:
        return _failed(err, f"key {args.name!r}'s limit not set: {result.problem()}", result)
    entry = next((k for k in result.keys if k.get("name") == args.name), {})
    if args.json:
        print(json.dumps({**_entry(entry, args.name), **_runtime(result)}, indent=2))
    else:
        print(
            f"key {args.name}: {_limit_words(entry.get('max_concurrent'))}. "
            f"{_runtime_sentence(result, 'counts it')}"
        )
    return EXIT_OK


def _run_usage(args: argparse.Namespace) -> int:
    err = Console(stderr=True, highlight=False)
    with _events(err, args) as on_event:
        result = run_keys(args.inventory, "usage", since=args.since, on_event=on_event)
    if not result.ok:
        return _failed(err, f"cannot read the usage: {result.problem()}", result)
    usage = result.usage
    if args.json:
        print(json.dumps({"since": args.since or "", **usage}, indent=2))
        return EXIT_OK
    print(
        f"{'KEY':<24} {'REQUESTS':>8} {'OK':>6} {'LIMITED':>7} {'FAILED':>6} "
        f"{'TOKENS IN':>10} {'TOKENS OUT':>10} {'COUNTED':>7}"
    )
    for k in usage.get("keys") or ():
        print(
            f"{k['name']:<24} {k['requests']:>8} {k['ok']:>6} {k['limited']:>7} {k['failed']:>6} "
            f"{k['tokens_in']:>10} {k['tokens_out']:>10} {k['counted']:>7}"
        )
    since = f" since {args.since}" if args.since else ""
    print(
        f"{usage.get('lines', 0)} log line(s){since}; `-` is requests without a known key "
        "(refused); COUNTED is the responses that reported their tokens"
    )
    return EXIT_OK


def _run_list(args: argparse.Namespace) -> int:
    err = Console(stderr=True, highlight=False)
    with _events(err, args) as on_event:
        result = run_keys(args.inventory, "list", on_event=on_event)
    if not result.ok:
        return _failed(err, f"cannot list the keys: {result.problem()}", result)
    keys = [_entry(k, str(k.get("name", ""))) for k in result.keys]
    if args.json:
        print(json.dumps({"keys": keys, "running": result.running}, indent=2))
        return EXIT_OK
    print(f"{'NAME':<24} {'CREATED':<21} {'SHA256':<14} {'LIMIT':<8} KIND")
    for k in keys:
        prefix = k["sha256_prefix"] + "..."
        limit = DEFAULT_LIMIT if k["max_concurrent"] is None else str(k["max_concurrent"])
        print(f"{k['name']:<24} {k['created'] or '-':<21} {prefix:<14} {limit:<8} {k['kind']}")
    print(f"{len(keys)} key(s); the gateway is {'running' if result.running else 'not running'}")
    return EXIT_OK


def _entry(entry: Mapping[str, Any], name: str) -> dict[str, Any]:
    limit = entry.get("max_concurrent")
    return {
        "name": str(entry.get("name") or name),
        "created": str(entry.get("created") or ""),
        "sha256_prefix": str(entry.get("sha256_prefix") or ""),
        "kind": str(entry.get("kind") or "user"),
        "max_concurrent": limit if isinstance(limit, int) else None,
    }


def _limit_words(limit: object) -> str:
    if not isinstance(limit, int):
        return "the gateway's default limit of requests in flight"
    if limit == 0:
        return "no limit of requests in flight"
    return f"at most {limit} request(s) in flight at once"


def _runtime(result: KeysRun) -> dict[str, Any]:
    return {"gateway_running": result.running, "runtime": list(result.runtime)}


def _runtime_sentence(result: KeysRun, verb: str) -> str:
    if result.running:
        return f"The running gateway {verb} from the next request (no reload, no restart)."
    return "No gateway runs on the head now; it reads the keys when it starts."


def _failed(err: Console, message: str, result: KeysRun) -> int:
    err.print(f"gx10 keys: {message}", markup=False)
    err.print(f"(artifacts in {result.run.artifact_dir})", markup=False, style="dim")
    return EXIT_FAILED


@contextlib.contextmanager
def _reserved(path: Path | None, what: str = "--key-file") -> Iterator[Any]:
    """A key file (`--key-file`, or the service key's): created now, empty and 0600, so a path
    that cannot be written (or exists) fails before anything runs; removed again if no key was
    written into it."""
    if path is None:
        yield None
        return
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise KeysError(
            f"{what} {path} exists: a key file is never overwritten; give a new path, or "
            "remove the old file first"
        ) from None
    except OSError as exc:
        raise KeysError(f"{what} {path}: cannot create it ({exc.strerror or exc})") from None
    written = False
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            yield handle
            written = handle.tell() > 0
    finally:
        if not written:
            with contextlib.suppress(OSError):
                path.unlink()
