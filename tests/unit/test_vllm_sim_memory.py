"""The vLLM simulator's memory model (test equipment for issue 13's memory safety).

The expected figures are worked out here from vLLM's arithmetic and the documented constants
(1.0 GiB non-torch, 1.5 GiB activation peak, 0.31 GiB CUDA graphs, fp32 sampler logits), not
read back from the module, so a change to the model has to change these tests too. Messages are
compared whole with vLLM's wording (vllm/v1/core/kv_cache_utils.py, vllm/v1/worker/gpu_worker.py).
Process tests run the simulator pair on loopback (test_vllm_sim's Launcher, killed by PID).
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_vllm_sim import Launcher, healthy, http, make_model, wait_until

from gx10.lab.checkpoint import small_files
from gx10.lab.simulators import vllm_sim as sim
from gx10.lab.simulators.vllm_sim import memory
from gx10.lab.simulators.vllm_sim.engine import KvLease
from gx10.lab.simulators.vllm_sim.errors import SimFatal
from gx10.lab.simulators.vllm_sim.metrics import render_metrics
from gx10.lab.simulators.vllm_sim.model import ModelInfo

GIB = 1 << 30
LAB_CONFIG = json.loads(small_files()["config.json"])  # the lab checkpoint: 43 layers, V4
DOCS = "https://docs.vllm.ai/en/latest/configuration/conserving_memory/"
CONTEXT = 1048576
# The lab's flags (roles/vllm_serve defaults): nvfp4_ds_mla, blocks of 256, 0.835.
LAB_FLAGS = (
    "--kv-cache-dtype",
    "nvfp4_ds_mla",
    "--block-size",
    "256",
    "--max-model-len",
    str(CONTEXT),
    "--max-num-seqs",
    "12",
    "--max-num-batched-tokens",
    "8192",
    "--gpu-memory-utilization",
    "0.835",
)
# One token of the lab checkpoint at nvfp4_ds_mla: 400 B in each of its 43 layers.
TOKEN_BYTES = 43 * 400
BLOCK_BYTES = 256 * TOKEN_BYTES  # one block of 256 tokens, every layer
# Runtime per rank at 12 sequences: non-torch + activation peak + 12 x 129280 fp32 logits +
# CUDA graphs.
RUNTIME = GIB + int(1.5 * GIB) + 12 * 129280 * 4 + int(0.31 * GIB)


def gib(size: int) -> float:
    """vLLM's format_gib, written out."""
    return round(size / GIB, 2)


def serve_args(*flags: str) -> argparse.Namespace:
    return sim.parse_args(["serve", "/model", *flags])


def lab_model(path: Path = Path("/model"), config: dict[str, object] | None = None) -> ModelInfo:
    return ModelInfo(str(path), "DeepseekV4ForCausalLM", 131072, None, config or LAB_CONFIG)


def plan(*flags: str, total_gib: float = 121.6, weights_gib: float = 0.0) -> memory.MemoryPlan:
    args = serve_args(*LAB_FLAGS, *flags)
    env = sim.SimEnv(mem_total_gib=total_gib, weights_gib=weights_gib)
    return memory.plan_memory(args, env, lab_model(), args.max_model_len)


# --------------------------------------------------------------------------------------------
# The arithmetic
# --------------------------------------------------------------------------------------------


def test_kv_bytes_per_token_follow_the_cache_dtype_and_the_layers() -> None:
    model = lab_model()
    spec = memory.kv_spec(serve_args(*LAB_FLAGS), model)
    assert (spec.layers, spec.token_bytes, spec.block_size, spec.mla) == (43, 400, 256, True)
    by_dtype = {
        dtype: memory.kv_spec(serve_args("--kv-cache-dtype", dtype), model).token_bytes
        for dtype in ("fp8_ds_mla", "fp8", "auto", "bfloat16")
    }
    # fp8_ds_mla: 512 fp8 + 4 float32 scales + 64 bf16; otherwise the 576-wide latent.
    assert by_dtype == {"fp8_ds_mla": 656, "fp8": 576, "auto": 1152, "bfloat16": 1152}
    # MLA keeps the whole latent on every TP rank; pipeline stages split the layers.
    split = memory.kv_spec(serve_args(*LAB_FLAGS, "-tp", "2", "-pp", "2"), model)
    assert (split.layers, split.token_bytes) == (22, 400)
    # A GQA model's keys and values are split over the TP ranks (at least one head each).
    gqa = ModelInfo(
        "/m",
        "LlamaForCausalLM",
        4096,
        None,
        {"num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
         "hidden_size": 4096},
    )  # fmt: skip
    assert memory.kv_spec(serve_args("-tp", "2"), gqa).token_bytes == 2 * 4 * 128 * 2
    assert memory.kv_spec(serve_args("-tp", "16"), gqa).token_bytes == 2 * 1 * 128 * 2


def test_the_lab_configuration_fits_a_gb10_with_vllms_figures() -> None:
    """The lab's flags and checkpoint on a modelled GB10: vLLM's share, the rest for the KV
    cache, its blocks, and the concurrency the engine will report."""
    lab = plan("-tp", "2", weights_gib=0.05)
    requested = int(int(121.6 * GIB) * 0.835)
    weights = int(0.05 * GIB) // 2
    available = requested - weights - RUNTIME
    assert lab.requested == requested
    assert lab.weights == weights
    assert lab.available_kv == available
    assert lab.num_blocks == available // (256 * 400) // 43
    assert lab.request_kv == 4096 * BLOCK_BYTES  # 1,048,576 tokens = 4096 blocks
    assert memory.kv_cache_error(lab.available_kv, lab.kv, CONTEXT) is None
    assert memory.free_memory_error(lab) is None
    assert lab.kv_demand == 12 * 4096 * BLOCK_BYTES
    assert lab.footprint == weights + RUNTIME + lab.num_blocks * BLOCK_BYTES
    assert lab.footprint <= requested


def test_the_figures_grow_with_context_and_sequences() -> None:
    contexts = [plan("--max-model-len", str(n)) for n in (32768, 262144, CONTEXT, 2 * CONTEXT)]
    needs = [p.request_kv for p in contexts]
    assert needs == sorted(needs)
    assert len(set(needs)) == 4
    assert needs[-1] == 2 * needs[-2]
    seqs = [plan("--max-num-seqs", str(n)) for n in (1, 6, 12, 256)]
    demands = [p.kv_demand for p in seqs]
    assert demands == [n * 4096 * BLOCK_BYTES for n in (1, 6, 12, 256)]
    # The sampler's logits grow with the sequences, so the cache gets a little less.
    available = [p.available_kv for p in seqs]
    assert available == sorted(available, reverse=True)
    assert len(set(available)) == 4
    assert available[0] - available[1] == 5 * 129280 * 4


def test_one_byte_decides_at_the_boundary() -> None:
    """vLLM needs room for one request of max_model_len: exactly enough fits, a byte less not."""
    base = plan()
    exact = base.non_kv + base.cuda_graphs + base.request_kv
    node = dataclasses.replace(base.node, total=exact, free=exact)
    fits = dataclasses.replace(base, node=node, utilization=1.0)
    assert fits.available_kv == fits.request_kv
    assert memory.kv_cache_error(fits.available_kv, fits.kv, CONTEXT) is None
    short = dataclasses.replace(fits, node=dataclasses.replace(node, total=exact - 1))
    assert short.available_kv == short.request_kv - 1
    assert memory.kv_cache_error(short.available_kv, short.kv, CONTEXT) is not None
    # vLLM's estimate is the longest that fits: it fits, a token more does not.
    estimate = memory.estimate_max_model_len(short.available_kv, short.kv, CONTEXT)
    assert estimate == CONTEXT - 256
    assert memory.kv_cache_error(short.available_kv, short.kv, estimate) is None
    assert memory.kv_cache_error(short.available_kv, short.kv, estimate + 1) is not None
    # Free memory at start: exactly vLLM's share is enough.
    free = dataclasses.replace(fits, node=dataclasses.replace(node, free=fits.requested))
    assert memory.free_memory_error(free) is None
    less = dataclasses.replace(free, node=dataclasses.replace(node, free=fits.requested - 1))
    assert memory.free_memory_error(less) is not None


def test_the_messages_are_vllms() -> None:
    small = plan(total_gib=16)
    available = int(int(16 * GIB) * 0.835) - RUNTIME
    assert small.available_kv == available
    estimate = available // BLOCK_BYTES * 256
    assert memory.kv_cache_error(small.available_kv, small.kv, CONTEXT) == (
        f"To serve at least one request with the models's max seq len ({CONTEXT}), "
        f"({gib(4096 * BLOCK_BYTES)} GiB KV cache is needed, which is larger than the available "
        f"KV cache memory ({gib(available)} GiB). Based on the available memory, the estimated "
        f"maximum model length is {estimate}. Try increasing `gpu_memory_utilization` or "
        f"decreasing `max_model_len` when initializing the engine. See {DOCS} for more details."
    )
    assert "(16.8 GiB KV cache is needed" in str(
        memory.kv_cache_error(available, small.kv, CONTEXT)
    )
    # Less than one block for every layer: no estimate sentence.
    tiny = memory.kv_cache_error(BLOCK_BYTES - 1, small.kv, CONTEXT)
    assert tiny is not None
    assert "Based on the available memory" not in tiny
    assert "KV cache memory (0.0 GiB). Try increasing" in tiny
    for nothing in (0, -5 * GIB):
        assert memory.kv_cache_error(nothing, small.kv, CONTEXT) == (
            "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` "
            f"when initializing the engine. See {DOCS} for more details."
        )
    busy = dataclasses.replace(small, node=memory.NodeMemory(int(121.6 * GIB), 90 * GIB, "x"))
    assert memory.free_memory_error(busy) == (
        "Free memory on device (90.0/121.6 GiB) on startup is less than desired GPU memory "
        "utilization (0.835, 101.54 GiB). Decrease GPU memory utilization or reduce GPU memory "
        "used by other processes."
    )


def test_gpu_memory_utilization_outside_0_to_1_is_refused_as_vllms_config_does() -> None:
    with pytest.raises(SimFatal) as caught:
        plan("--gpu-memory-utilization", "1.5")
    assert "gpu_memory_utilization\n  Input should be less than or equal to 1" in str(caught.value)
    with pytest.raises(SimFatal, match="Input should be greater than 0"):
        plan("--gpu-memory-utilization", "0")


# --------------------------------------------------------------------------------------------
# The node and the checkpoint
# --------------------------------------------------------------------------------------------


def test_the_node_memory_comes_from_meminfo_unless_the_knobs_set_it(tmp_path: Path) -> None:
    meminfo = tmp_path / "meminfo"
    meminfo.write_text(
        "MemTotal:       127517184 kB\nMemFree:         2000000 kB\nMemAvailable:   120000000 kB\n"
    )
    node = memory.node_memory(sim.SimEnv(), meminfo)
    assert (node.total, node.free) == (127517184 * 1024, 120000000 * 1024)
    assert node.source == f"{meminfo} MemTotal"
    page_cache = memory.node_memory(sim.SimEnv(mem_available_gib=50), meminfo)
    assert (page_cache.total, page_cache.free) == (127517184 * 1024, 50 * GIB)
    gb10 = memory.node_memory(sim.SimEnv(mem_total_gib=121.6), meminfo)
    assert (gb10.total, gb10.free, gb10.source) == (
        int(121.6 * GIB),
        int(121.6 * GIB),
        "GX10_SIM_MEM_TOTAL_GIB",
    )
    with pytest.raises(SimFatal, match="set GX10_SIM_MEM_TOTAL_GIB"):
        memory.node_memory(sim.SimEnv(), tmp_path / "missing")


def test_bad_memory_knobs_name_the_variable_and_the_fix() -> None:
    env = sim.SimEnv.from_env(
        {"GX10_SIM_MEM_TOTAL_GIB": "lots", "GX10_SIM_WEIGHTS_GIB": "-3", "GX10_SIM_SEED": "1"}
    )
    problems = env.problems()
    assert problems == [
        "GX10_SIM_MEM_TOTAL_GIB='lots' is not a size in GiB: set a number >= 0 (for example "
        "121.6) or unset it",
        "GX10_SIM_WEIGHTS_GIB='-3' is not a size in GiB: set a number >= 0 (for example "
        "121.6) or unset it",
    ]
    assert sim.SimEnv.from_env({"GX10_SIM_MEM_TOTAL_GIB": "121.6"}).problems() == []


def test_the_weights_are_the_checkpoints_shards_split_over_the_ranks(tmp_path: Path) -> None:
    model = make_model(tmp_path / "m", LAB_CONFIG)
    with (model / "model-00001-of-00002.safetensors").open("wb") as shard:
        shard.truncate(6 * GIB)  # sparse: a size, no disk
    with (model / "model-00002-of-00002.safetensors").open("wb") as shard:
        shard.truncate(4 * GIB)
    assert memory.checkpoint_bytes(model) == 10 * GIB
    args = serve_args(*LAB_FLAGS, "-tp", "2")
    info = lab_model(model)
    assert memory.plan_memory(args, sim.SimEnv(mem_total_gib=121.6), info, CONTEXT).weights == (
        5 * GIB
    )
    # GX10_SIM_WEIGHTS_GIB is the whole checkpoint (DeepSeek V4 Flash: 166.9 GB).
    real = sim.SimEnv(mem_total_gib=121.6, weights_gib=166.9e9 / GIB)
    assert memory.plan_memory(args, real, info, CONTEXT).weights == int(166.9e9) // 2
    index = make_model(tmp_path / "index", LAB_CONFIG)
    (index / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": 77}})
    )
    assert memory.checkpoint_bytes(index) == 77


# --------------------------------------------------------------------------------------------
# The engine's block pool and /metrics
# --------------------------------------------------------------------------------------------


def test_requests_hold_blocks_as_they_grow_and_wait_for_free_ones() -> None:
    labels = {"block_size": "16", "num_gpu_blocks": "10", "engine": "0"}
    engine = sim.Engine(sim.SimEnv(), 4, 0, sim.Log(), block_size=16, kv_blocks=10,
                        cache_config=labels)  # fmt: skip
    first = engine.admit(48)  # 3 blocks
    assert (first.blocks, engine.kv_used, engine.kv_usage()) == (3, 3, 0.3)
    engine.grow(first, 49)  # the first output token opens a fourth block
    engine.grow(first, 64)  # still four
    assert (first.blocks, engine.kv_usage()) == (4, 0.4)
    second = engine.admit(80)  # 5 more: 9 of 10
    assert engine.kv_usage() == 0.9
    admitted: list[KvLease] = []
    waiter = threading.Thread(target=lambda: admitted.append(engine.admit(32)), daemon=True)
    waiter.start()
    wait_until(lambda: engine.waiting == 1, 5, "the request waiting for blocks")
    assert not admitted  # 2 blocks are not free: it waits as vLLM's scheduler keeps it waiting
    engine.release(first)
    waiter.join(timeout=5)
    assert admitted
    assert admitted[0].blocks == 2
    assert engine.kv_used == 5 + 2
    out = render_metrics(engine, "m")
    assert 'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.7' in out
    assert 'vllm:cache_config_info{block_size="16",num_gpu_blocks="10",engine="0"} 1.0' in out
    engine.release(second)
    engine.release(admitted[0])
    assert (engine.kv_used, engine.kv_usage(), engine.running) == (0, 0.0, 0)


def test_a_request_runs_alone_even_beyond_the_pool() -> None:
    """The boot check guarantees one max_model_len request fits; with nothing running a request
    is never kept waiting, and growth past the pool shows as a full cache."""
    engine = sim.Engine(sim.SimEnv(), 4, 0, sim.Log(), block_size=16, kv_blocks=2)
    lease = engine.admit(100)
    assert lease.blocks == 7
    assert engine.kv_usage() == 1.0
    engine.release(lease)


# --------------------------------------------------------------------------------------------
# The simulator pair: vLLM's lines in vLLM's order, and its failures
# --------------------------------------------------------------------------------------------


def _lab_launcher(workdir: Path, shard_gib: int = 10) -> Launcher:
    launcher = Launcher(workdir)
    make_model(launcher.model, LAB_CONFIG)
    with (launcher.model / "model-00001-of-00001.safetensors").open("wb") as shard:
        shard.truncate(shard_gib * GIB)
    return launcher


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[Launcher]:
    launcher = _lab_launcher(tmp_path)
    try:
        yield launcher
    finally:
        launcher.close()


def _in_order(text: str, markers: list[str]) -> None:
    where = [text.find(m) for m in markers]
    assert -1 not in where, [m for m, i in zip(markers, where, strict=True) if i < 0]
    assert where == sorted(where), text


def test_a_pair_that_fits_logs_vllms_memory_lines_in_order_and_exports_its_pool(
    lab: Launcher,
) -> None:
    head, worker, url = lab.pair(*LAB_FLAGS)
    wait_until(lambda: healthy(url) or not head.alive(), 20, "the head")
    assert head.alive(), head.output()
    available = int(int(121.6 * GIB) * 0.835) - 5 * GIB - RUNTIME
    blocks = available // BLOCK_BYTES
    out = head.output()
    _in_order(
        out,
        [
            "Model loading took 5.0 GiB memory and",
            "torch.compile takes",
            f"Available KV cache memory: {gib(available)} GiB",
            "[gx10-sim] memory model, rank 0: node 121.6 GiB (GX10_SIM_MEM_TOTAL_GIB)",
            f"GPU KV cache size: {blocks * 256:,} tokens",
            f"Maximum concurrency for 1,048,576 tokens per request: {blocks / 4096:.2f}x",
            "Capturing CUDA graphs",
            "Graph capturing finished in",
            "Starting vLLM API server 0",
        ],
    )
    assert "12 sequence(s) of 1,048,576 tokens need 201.56 GiB of KV" in out
    # The workers report their memory; the engine core (on the head) sizes the cache.
    _in_order(
        worker.output(),
        [
            "Model loading took 5.0 GiB memory",
            f"Available KV cache memory: {gib(available)} GiB",
            "Capturing CUDA graphs",
            "Worker ready",
        ],
    )
    assert "GPU KV cache size" not in worker.output()
    status, text = http("GET", f"{url}/metrics")
    assert status == 200
    assert (
        'vllm:cache_config_info{block_size="256",gpu_memory_utilization="0.835",'
        'cache_dtype="nvfp4_ds_mla",num_gpu_blocks_override="None",enable_prefix_caching="True",'
        f'num_gpu_blocks="{blocks}",num_cpu_blocks="0",engine="0"}} 1.0'
    ) in text
    assert "vllm:kv_cache_usage_perc{" in text


def test_a_context_that_does_not_fit_stops_the_engine_with_vllms_message(
    lab: Launcher,
) -> None:
    """A 16 GiB node cannot hold one 1M-token request: the head fails after its profile run,
    before graph capture and the API, with vLLM's ValueError; the worker stays up, detached."""
    small = {"GX10_SIM_MEM_TOTAL_GIB": "16"}
    head, worker, url = lab.pair(*LAB_FLAGS, head_env=small, worker_env=small)
    assert head.wait(timeout=20) == 1
    available = int(int(16 * GIB) * 0.835) - 5 * GIB - RUNTIME
    out = head.output()
    message = (
        f"ValueError: To serve at least one request with the models's max seq len ({CONTEXT}), "
        f"(16.8 GiB KV cache is needed, which is larger than the available KV cache memory "
        f"({gib(available)} GiB). Based on the available memory, the estimated maximum model "
        f"length is {available // BLOCK_BYTES * 256}. Try increasing `gpu_memory_utilization` "
        "or decreasing `max_model_len` when initializing the engine."
    )
    assert message in out
    _in_order(
        out,
        [
            "Model loading took 5.0 GiB memory",
            f"Available KV cache memory: {gib(available)} GiB",
            "ERROR",
            "EngineCore failed to start.",
            message,
            "RuntimeError: Engine core initialization failed. See root cause above. "
            "Failed core proc(s): {}",
        ],
    )
    for never in ("GPU KV cache size", "Capturing CUDA graphs", "Starting vLLM API server"):
        assert never not in out
    assert not healthy(url)
    wait_until(lambda: "recvValue failed" in worker.output(), 10, "the worker losing its head")
    assert worker.alive()
    assert "Capturing CUDA graphs" not in worker.output()


def test_the_engine_core_checks_every_ranks_memory(lab: Launcher) -> None:
    """Only the worker's node is short: its figure is the one vLLM names."""
    head, _worker, _url = lab.pair(*LAB_FLAGS, worker_env={"GX10_SIM_MEM_TOTAL_GIB": "16"})
    assert head.wait(timeout=20) == 1
    worker_available = int(int(16 * GIB) * 0.835) - 5 * GIB - RUNTIME
    head_available = int(int(121.6 * GIB) * 0.835) - 5 * GIB - RUNTIME
    out = head.output()
    assert f"Available KV cache memory: {gib(head_available)} GiB" in out
    assert f"larger than the available KV cache memory ({gib(worker_available)} GiB)" in out


def test_weights_beyond_vllms_share_leave_no_cache_memory(lab: Launcher) -> None:
    """The whole 166.9 GB checkpoint on one GB10 (tensor parallel 1): no room for any cache."""
    code, out = lab.run(
        str(lab.model),
        *LAB_FLAGS,
        "--port",
        "0",
        env={"GX10_SIM_WEIGHTS_GIB": str(166.9e9 / GIB)},
    )
    assert code == 1
    assert "Model loading took 155.44 GiB memory" in out
    assert "Available KV cache memory: -56.72 GiB" in out
    assert "ValueError: No available memory for the cache blocks." in out
    assert out.rstrip().endswith("Failed core proc(s): {}")


def test_a_busy_node_refuses_to_start_before_the_weights(lab: Launcher) -> None:
    """Page cache or another process holds memory: vLLM's share is not free at start (on GB10
    vLLM reads MemAvailable), so the rank refuses before it loads anything."""
    busy = {"GX10_SIM_MEM_AVAILABLE_GIB": "90"}
    head, worker, _url = lab.pair(*LAB_FLAGS, worker_env=busy)
    assert worker.wait(timeout=20) == 1
    free = (
        "ValueError: Free memory on device (90.0/121.6 GiB) on startup is less than desired GPU "
        "memory utilization (0.835, 101.54 GiB). Decrease GPU memory utilization or reduce GPU "
        "memory used by other processes."
    )
    assert free in worker.output()
    assert "Loading weights" not in worker.output()
    assert head.wait(timeout=20) == 1
    _in_order(
        head.output(),
        [
            "EngineCore failed to start.",
            "Exception: WorkerProc initialization failed due to an exception in a background "
            "process. See stack trace for root cause.",
            "RuntimeError: Engine core initialization failed.",
        ],
    )


def test_a_bad_memory_knob_stops_the_simulator_at_once(lab: Launcher) -> None:
    code, out = lab.run(str(lab.model), env={"GX10_SIM_MEM_TOTAL_GIB": "121.6GB"})
    assert code == 1
    assert "ValueError: [gx10-sim] GX10_SIM_MEM_TOTAL_GIB='121.6GB' is not a size in GiB" in out


def test_the_sim_line_is_marked_as_the_simulators_own() -> None:
    out = io.StringIO()
    lab = plan("-tp", "2")
    memory.log_available(sim.Log(out=out), lab, 1)
    lines = out.getvalue().splitlines()
    assert len(lines) == 2  # the debug lines stay hidden at INFO
    assert lines[0].endswith(
        f"[gpu_worker.py:440] Available KV cache memory: {gib(lab.available_kv)} GiB"
    )
    assert "[gx10_sim.py:1] [gx10-sim] memory model, rank 1:" in lines[1]
