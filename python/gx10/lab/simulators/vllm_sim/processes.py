"""Processes: the head (rank 0, serves HTTP) and the headless workers."""

from __future__ import annotations

import argparse
import contextlib
import os
import queue
import signal
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from .api import Server, ServerConfig
from .boot import Boot
from .cli import non_default_args
from .comm import comm_init, remote_comm_error
from .deepseek_v4_encoding import LOADED_FILE, LOADED_SHA256
from .engine import Engine
from .env import SimEnv
from .errors import EXIT_ERROR, EXIT_OK, SimFatal
from .gpu_load import GpuLoad
from .http_server import ROUTES, ApiServer
from .log import Log, torch_stamp
from .memory import (
    MemoryPlan,
    cache_config_labels,
    free_memory_error,
    kv_cache_error,
    log_kv_config,
    plan_memory,
)
from .model import ModelInfo, check_parallel, load_model
from .rendezvous import Channel, HeadRendezvous, PeerLostError, connect_to_head


class Stop:
    """SIGTERM/SIGINT: ask the main loop to end cleanly."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.signum: int | None = None

    def install(self) -> None:
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, self._handle)

    def _handle(self, signum: int, _frame: Any) -> None:
        self.signum = signum
        self.event.set()


def make_boot(
    args: argparse.Namespace,
    env: SimEnv,
    stop: threading.Event,
    log: Log,
    model: ModelInfo,
    *,
    rank: int,
    memory: MemoryPlan,
) -> Boot:
    """This rank's weights, compile, KV cache memory and graph capture (see boot.py)."""
    return Boot(
        env,
        stop,
        log,
        model,
        rank=rank,
        world=args.tensor_parallel_size * args.pipeline_parallel_size,
        max_len=memory.max_model_len,
        eager=bool(getattr(args, "enforce_eager", False)),
        memory=memory,
    )


# vLLM's own lines when an engine does not come up (v1/engine/core.py run_engine_core,
# v1/executor/multiproc_executor.py, v1/engine/utils.py wait_for_engine_startup).
ENGINE_CORE_FAILED = (
    "Engine core initialization failed. See root cause above. Failed core proc(s): {}"
)
WORKER_FAILED = (
    "WorkerProc initialization failed due to an exception in a background process. "
    "See stack trace for root cause."
)
VLLM_LIB = "/usr/local/lib/python3.12/dist-packages/vllm"


def worker_failed(log: Log, exc_type: str, message: str, frame: str) -> None:
    """A worker process's own report of an exception at start (`frame`: where it was raised)."""
    log.error_at(
        "multiproc_executor.py:671",
        f"WorkerProc failed to start.\nTraceback (most recent call last):\n{frame}\n"
        f"{exc_type}: {message}",
    )


def engine_core_failed(log: Log, exc_type: str, message: str, frame: str) -> SimFatal:
    """The engine core's report of the exception that stopped it, and the API server's end."""
    log.error_at(
        "core.py:708",
        f"EngineCore failed to start.\nTraceback (most recent call last):\n{frame}\n"
        f"{exc_type}: {message}",
    )
    return SimFatal("RuntimeError", ENGINE_CORE_FAILED)


INIT_DEVICE_FRAME = (
    f'  File "{VLLM_LIB}/v1/worker/gpu_worker.py", line 229, in init_device\n    raise ValueError('
)
KV_CHECK_FRAME = (
    f'  File "{VLLM_LIB}/v1/core/kv_cache_utils.py", line 687, in '
    "_check_enough_kv_cache_memory\n    raise ValueError("
)
WAIT_READY_FRAME = (
    f'  File "{VLLM_LIB}/v1/executor/multiproc_executor.py", line 497, in wait_for_ready\n'
    "    raise e from None"
)


def log_encoding(log: Log) -> None:
    """Which chat encoding this rank runs: the file, and the sha256 it had when imported."""
    log.info_at("deepseek_v4.py:52", f"DeepSeek V4 encoding {LOADED_FILE} (sha256 {LOADED_SHA256})")


def clear_stall(env: SimEnv, log: Log) -> None:
    """A stall is the engine's state: a (re)started head begins without one (nor with the
    battery's break file: a restart serves as the real server does)."""
    with contextlib.suppress(FileNotFoundError):
        env.stall_file.unlink()
        log.info_at("core.py:711", f"removed a leftover stall file {env.stall_file}")
    with contextlib.suppress(FileNotFoundError):
        env.break_file.unlink()
        log.info_at("core.py:711", f"removed a leftover break file {env.break_file}")


class Head:
    """Rank 0: rendezvous, NCCL init, weights, then the API server until told to stop."""

    def __init__(self, args: argparse.Namespace, env: SimEnv, stop: Stop) -> None:
        self.args, self.env, self.stop = args, env, stop
        pid = os.getpid()
        self.log = Log(f"(APIServer pid={pid}) ", env.log_level)
        self.engine_log = self.log.child(f"(EngineCore_DP0 pid={pid}) ")
        self.rendezvous: HeadRendezvous | None = None
        self.httpd: ApiServer | None = None
        self.gpu_load: GpuLoad | None = None

    def run(self) -> int:
        args, env, log = self.args, self.env, self.log
        log.info_at("api_server.py:1885", f"vLLM API server version {env.version}")
        log.info_at("utils.py:253", f"non-default args: {non_default_args(args)}")
        log_encoding(log)
        host = args.host or "0.0.0.0"
        clear_stall(env, log)
        httpd = self._bind_http(host)
        try:
            return self._boot_and_serve(httpd, host)
        finally:
            httpd.server_close()
            if self.gpu_load is not None:
                self.gpu_load.close()  # before the channels close: the workers get the 0 too
            if self.rendezvous is not None:
                self.rendezvous.close()

    def _bind_http(self, host: str) -> ApiServer:
        placeholder = Server(
            ServerConfig((), ModelInfo("", "", 0, None), 0, (), None, None, False, {}, 0),
            Engine(self.env, 1, 0, self.log),
        )
        httpd = ApiServer((host, self.args.port), placeholder, self.log)
        try:
            httpd.server_bind()
        except OSError as error:
            httpd.server_close()
            raise SimFatal(
                "OSError", f"[Errno {error.errno}] {os.strerror(error.errno or 0)}"
            ) from error
        return httpd

    def _boot_and_serve(self, httpd: ApiServer, host: str) -> int:
        args, env, log = self.args, self.env, self.log
        model = load_model(args.model, args.trust_remote_code, args.revision)
        log.info_at("model.py:547", f"Resolved architecture: {model.architecture}")
        max_len = args.max_model_len or model.max_position_embeddings
        log.info_at("model.py:1510", f"Using max model len {max_len}")
        if args.revision:
            log.info_at("model.py:560", f"Model revision: {args.revision}")
        check_parallel(args, env.gpus_per_node)
        world = args.tensor_parallel_size * args.pipeline_parallel_size
        self._join_workers(world)
        memory = plan_memory(args, env, model, max_len)
        no_room = free_memory_error(memory)
        if no_room is not None:  # rank 0's init_device, in its worker process
            worker_failed(self._worker_log(), "ValueError", no_room, INIT_DEVICE_FRAME)
            raise engine_core_failed(self.engine_log, "Exception", WORKER_FAILED, WAIT_READY_FRAME)
        booter = make_boot(
            args, env, self.stop.event, self.engine_log, model, rank=0, memory=memory
        )
        booter.profile()
        blocks = self._size_kv_cache(memory)
        booter.capture()
        if self.rendezvous is not None:
            self._gather("loaded")
            self.rendezvous.broadcast({"op": "ready"})
        api = self._make_api(model, max_len, memory, blocks)
        httpd.api = api
        httpd.server_activate()
        threading.Thread(
            target=httpd.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True, name="http"
        ).start()
        self.httpd = httpd
        port = httpd.server_address[1]
        log.info_at("api_server.py:1971", f"Starting vLLM API server 0 on http://{host}:{port}")
        log.info_at("launcher.py:36", "Available routes are:")
        for route, methods in ROUTES.items():
            log.info_at("launcher.py:44", f"Route: {route}, Methods: {', '.join(methods)}")
        log.uvicorn(f"Started server process [{os.getpid()}]")
        log.uvicorn("Waiting for application startup.")
        log.uvicorn("Application startup complete.")
        return self._serve(api.engine)

    def _join_workers(self, world: int) -> None:
        args, env = self.args, self.env
        log = self.engine_log
        if args.nnodes > 1:
            log.info_at(
                "parallel_state.py:1100",
                f"world_size={world} rank=0 local_rank=0 "
                f"distributed_init_method=tcp://{args.master_addr}:{args.master_port} "
                "backend=nccl",
            )
            self.rendezvous = HeadRendezvous(args, env, log)
            self.rendezvous.wait_for_workers(self.stop.event)
            self.rendezvous.broadcast({"op": "init_comm"})
        log.info_at(
            "parallel_state.py:1165",
            f"rank 0 in world size {world} is assigned as DP "
            "rank 0, PP rank 0, TP rank 0, EP rank 0",
        )
        problem = comm_init(env, log, world > 1)
        if self.rendezvous is None:
            if problem is not None:
                raise SimFatal(problem.exc_type, problem.message)
            return
        if problem is not None:
            self.rendezvous.broadcast({"op": "abort"})
            raise SimFatal(problem.exc_type, problem.message)
        replies = self._gather("comm")
        failed = [rank for rank, reply in replies.items() if not reply.get("ok")]
        if failed:
            self.rendezvous.broadcast({"op": "abort"})
            raise remote_comm_error(env, f"node rank {failed[0]}")
        self.rendezvous.broadcast({"op": "comm_ok"})

    def _worker_log(self) -> Log:
        return self.log.child(f"(Worker_TP0 pid={os.getpid()}) ")

    def _size_kv_cache(self, memory: MemoryPlan) -> int:
        """The engine core sizes the KV cache from every rank's available memory: each must hold
        one request of max_model_len (in rank order, the first that cannot stops the engine);
        the pool is the smallest rank's. Returns the pool's blocks; the workers go on to capture."""
        available = {0: memory.available_kv}
        if self.rendezvous is not None:
            replies = self._gather("profiled")
            if any(reply.get("error") for reply in replies.values()):
                raise engine_core_failed(
                    self.engine_log, "Exception", WORKER_FAILED, WAIT_READY_FRAME
                )
            available.update(
                {rank: int(reply.get("available", 0)) for rank, reply in replies.items()}
            )
        kv = memory.kv
        for rank in sorted(available):
            problem = kv_cache_error(available[rank], kv, memory.max_model_len)
            if problem is not None:
                raise engine_core_failed(self.engine_log, "ValueError", problem, KV_CHECK_FRAME)
        blocks = min(size // kv.page_bytes // kv.layers for size in available.values())
        log_kv_config(self.engine_log, blocks, kv, memory.max_model_len)
        if self.rendezvous is not None:
            self.rendezvous.broadcast({"op": "kv_ok", "blocks": blocks})
        return blocks

    def _gather(self, op: str) -> dict[int, dict[str, Any]]:
        assert self.rendezvous is not None
        timeout = max(self.env.rendezvous_timeout, self.env.boot_total + 30.0)
        try:
            return self.rendezvous.gather(op, timeout, self.stop.event)
        except PeerLostError as error:
            raise remote_comm_error(self.env, "a headless worker") from error
        except TimeoutError as error:
            raise SimFatal(
                "torch.distributed.DistStoreError",
                f"Timed out waiting for the workers' {op!r} after {int(timeout)} seconds",
            ) from error

    def _make_api(self, model: ModelInfo, max_len: int, memory: MemoryPlan, blocks: int) -> Server:
        args, env = self.args, self.env
        spec = args.speculative_config or {}
        spec_tokens = int(spec.get("num_speculative_tokens") or 0) if spec else 0
        engine = Engine(
            env,
            args.max_num_seqs or 256,
            spec_tokens,
            self.log,
            block_size=memory.kv.block_size,
            prefix_caching=args.enable_prefix_caching is not False,
            kv_blocks=blocks,
            cache_config=cache_config_labels(args, memory.kv, blocks),
        )
        if self.rendezvous is not None:
            for channel in self.rendezvous.peers.values():
                channel.on_lost(self._peer_lost(engine))
        self.gpu_load = GpuLoad(env.state_dir, self.log)
        if self.rendezvous is not None:
            peers = self.rendezvous
            self.gpu_load.sinks.append(lambda load: peers.broadcast({"op": "load", "load": load}))
        engine.load_listener = self.gpu_load.set
        self.gpu_load.set(0.0)  # a fresh engine idles (a killed one may have left its load)
        keys = tuple(args.api_key or ([env.api_key] if env.api_key else []))
        config = ServerConfig(
            served_names=tuple(args.served_model_name or [args.model]),
            model=model,
            max_model_len=max_len,
            api_keys=keys,
            reasoning_parser=args.reasoning_parser,
            tool_parser=args.tool_call_parser,
            auto_tools=args.enable_auto_tool_choice,
            default_kwargs=dict(args.default_chat_template_kwargs or {}),
            seed=env.seed if args.seed is None else args.seed,
        )
        return Server(config, engine)

    def _peer_lost(self, engine: Engine) -> Callable[[], None]:
        def lost() -> None:
            # Real vLLM logs nothing here: the head stays "healthy" until a step needs the peer.
            self.log.debug_at("multiproc_executor.py:160", "a headless worker stopped answering")
            engine.peer_lost.set()

        return lost

    def _serve(self, engine: Engine) -> int:
        while not self.stop.event.wait(0.1):
            if engine.dead.is_set():
                time.sleep(0.5)  # let in-flight requests get their 500
                self._shutdown()
                return EXIT_ERROR
        self._shutdown()
        return EXIT_OK

    def _shutdown(self) -> None:
        log = self.log
        log.uvicorn("Shutting down")
        if self.httpd is not None:
            self.httpd.shutdown()
        if self.gpu_load is not None:
            self.gpu_load.close()
        log.uvicorn("Waiting for application shutdown.")
        log.uvicorn("Application shutdown complete.")
        log.uvicorn(f"Finished server process [{os.getpid()}]")


class Worker:
    """A headless rank: join the head, init NCCL, load weights, then answer heartbeats."""

    def __init__(self, args: argparse.Namespace, env: SimEnv, stop: Stop) -> None:
        self.args, self.env, self.stop = args, env, stop
        self.log = Log("", env.log_level)
        rank = args.node_rank
        self.rank_log = self.log.child(f"(Worker_TP{rank} pid={os.getpid()}) ")
        self.gpu_load = GpuLoad(env.state_dir, self.rank_log)

    def run(self) -> int:
        args, env, log = self.args, self.env, self.log
        model = load_model(args.model, args.trust_remote_code, args.revision)
        if args.revision:
            log.info_at("model.py:560", f"Model revision: {args.revision}")
        log_encoding(log)
        check_parallel(args, env.gpus_per_node)
        log.info_at(
            "serve.py:190",
            f"Launching vLLM (v{env.version}) headless multiproc executor, "
            f"with head node address {args.master_addr}:{args.master_port} for "
            "torch.distributed process group.",
        )
        channel = connect_to_head(args, env, self.rank_log, self.stop.event)
        try:
            if self._init(channel, model):
                self.gpu_load.set(0.0)
            return self._idle(channel)
        finally:
            self.gpu_load.close()
            channel.close()

    def _expect(self, channel: Channel, ops: Sequence[str], timeout: float) -> str:
        try:
            while True:
                op = str(channel.recv(timeout, self.stop.event).get("op"))
                if op in ops:
                    return op
        except PeerLostError as error:
            raise remote_comm_error(self.env, f"{self.args.master_addr} (node rank 0)") from error
        except TimeoutError as error:
            raise SimFatal(
                "torch.distributed.DistStoreError",
                f"Timed out after {int(timeout)} seconds waiting for the head ({'/'.join(ops)})",
            ) from error

    def _init(self, channel: Channel, model: ModelInfo) -> bool:
        """Join the engine; False when the head went away while this rank waited for it to size
        the KV cache (the head's engine did not start): the rank then idles as with a lost head."""
        args, env, log = self.args, self.env, self.rank_log
        world = args.tensor_parallel_size * args.pipeline_parallel_size
        wait = max(env.rendezvous_timeout, env.boot_total + 30.0)
        if self._expect(channel, ("init_comm", "abort"), wait) == "abort":
            raise remote_comm_error(env, f"{args.master_addr} (node rank 0)")
        log.info_at(
            "parallel_state.py:1165",
            f"rank {args.node_rank} in world size {world} is "
            f"assigned as DP rank 0, PP rank 0, TP rank {args.node_rank}, EP rank "
            f"{args.node_rank}",
        )
        problem = comm_init(env, log, True)
        channel.send({"op": "comm", "ok": problem is None})
        if problem is not None:
            raise SimFatal(problem.exc_type, problem.message)
        if self._expect(channel, ("comm_ok", "abort"), wait) == "abort":
            raise remote_comm_error(env, f"{args.master_addr} (node rank 0)")
        memory = plan_memory(args, env, model, args.max_model_len or model.max_position_embeddings)
        no_room = free_memory_error(memory)
        if no_room is not None:  # this rank's init_device
            worker_failed(log, "ValueError", no_room, INIT_DEVICE_FRAME)
            channel.send({"op": "profiled", "error": no_room})
            raise SimFatal("ValueError", no_room)
        booter = make_boot(
            args, env, self.stop.event, log, model, rank=args.node_rank, memory=memory
        )
        booter.profile()
        channel.send({"op": "profiled", "available": memory.available_kv})
        if self._await_head(channel, ("kv_ok", "abort"), wait) != "kv_ok":
            return False
        booter.capture()
        channel.send({"op": "loaded"})
        self._expect(channel, ("ready",), wait)
        log.info_at("multiproc_executor.py:522", "Worker ready; waiting for work from the head.")
        return True

    def _await_head(self, channel: Channel, ops: Sequence[str], timeout: float) -> str | None:
        """Like _expect, but a head that went away is None: a headless rank does not exit."""
        try:
            return self._expect(channel, ops, timeout)
        except SimFatal:
            if channel.lost.is_set():
                return None
            raise

    def _idle(self, channel: Channel) -> int:
        """Serve until SIGTERM. A lost head is logged, again and again, and never rejoined."""
        repeat = max(10 * self.env.heartbeat_seconds, 1.0)
        next_log = 0.0
        while not self.stop.event.wait(0.1):
            self._take_load(channel)
            if channel.lost.is_set() and time.monotonic() >= next_log:
                self._log_lost_head(channel)
                next_log = time.monotonic() + repeat
        self.log.info_at("serve.py:250", "Shutting down.")
        return EXIT_OK

    def _take_load(self, channel: Channel) -> None:
        """Write the GPU load the head sent (in tensor parallel this GPU works as the head's)."""
        while True:
            try:
                message = channel.inbox.get_nowait()
            except queue.Empty:
                return
            load = message.get("load")
            if message.get("op") == "load" and isinstance(load, int | float):
                self.gpu_load.set(min(max(float(load), 0.0), 1.0))

    def _log_lost_head(self, channel: Channel) -> None:
        try:
            local = channel.sock.getsockname()
        except OSError:
            local = ("0.0.0.0", 0)
        args = self.args
        self.rank_log.raw(
            f"[rank{args.node_rank}]:[W{torch_stamp()} TCPStore.cpp:125] [c10d] recvValue "
            f"failed on SocketImpl(fd=-1, addr=[{local[0]}]:{local[1]}, remote=[{args.master_addr}"
            f"]:{args.master_port}): Failed to recv, got 0 bytes. Connection was likely closed. "
            "Did the remote server shutdown or crash?"
        )
