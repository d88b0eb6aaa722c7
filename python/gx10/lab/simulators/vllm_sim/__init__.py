"""`vllm serve` for a lab node: the multi-node launch and the OpenAI API, without a GPU.

Test equipment. The lab has no GPU, so this stands where the `vllm` entry point of the community
GB10 image lives. It keeps the contract the project depends on, as the real server shows it:

- the `vllm serve` flags we render (unknown flags rejected by the same argparse front end, exit 2);
- the multi-node mp launch: rank 0 listens on --master-addr:--master-port like torch's TCPStore,
  headless workers connect with retries, both sides time out with torch's wording; a heartbeat
  keeps the pair joined afterwards (a worker whose head died keeps running and never rejoins; a
  head whose worker died stays "healthy" until a request needs the collective, then the engine
  dies after VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS and the server exits, as observed on GX10 pairs);
- NCCL/Gloo environment sanity read from sysfs (interfaces, RDMA devices, the RoCE v2 GID index);
- model directory checks (config.json, trust_remote_code) with transformers/vLLM wording;
- the memory of each rank as vLLM V1 accounts for it (memory.py): the node's memory (MemTotal,
  MemAvailable as free, as vLLM reads them on GB10), the weights' share, the runtime's, and the
  KV cache the rest holds for --max-model-len at --kv-cache-dtype and --block-size. A rank whose
  share is not free at start, or whose cache cannot hold one request of max_model_len, stops the
  engine with vLLM's own message, at the point of the boot where vLLM raises it; a cache that
  fits is logged ("Available KV cache memory", "GPU KV cache size", "Maximum concurrency") and
  sizes the engine's block pool: requests wait for free blocks, /metrics shows the pool
  (vllm:cache_config_info) and its use (vllm:kv_cache_usage_perc);
- an OpenAI-compatible API on the head: /health, /v1/models, /v1/chat/completions (SSE, usage,
  reasoning, tool calls as the deepseek_v4 parser hands them over: ids, JSON arguments, parallel
  calls, streamed deltas, tool_choice), /v1/completions, /tokenize, /metrics, --api-key; and
  vLLM's Anthropic-compatible /v1/messages (content blocks, tool_use, stop_reason, usage), and
  its Responses API, /v1/responses (Codex's: output items, events, usage), whose shapes and error
  bodies are tested against the real engine's (tests/unit/test_vllm_sim_contract.py).

Text is generated deterministically (seeded by the prompt and the request's `seed`); timing comes
from a pluggable PerfModel. Standalone on purpose: it runs under Debian bookworm's python3.11 with
the standard library only, so its modules import one another relatively and nothing else. The
image installs the package as `vllm_sim` beside its `vllm` script (image/vllm-sim/vllm); here it
is `gx10.lab.simulators.vllm_sim` (`python -m gx10.lab.simulators.vllm_sim serve ...` runs it).

Modules, each importing only modules listed before it (tests/unit/test_vllm_sim_image.py checks):
  errors, log, perf       SimFatal and ApiError; vLLM's log format; the timing models
  env, breaks             SimEnv: every variable below, read once; the battery's break switch
  cli, model              the `vllm serve` flags; the model directory and the parallel layout
  memory                  a rank's memory: node, weights, runtime, KV cache; vLLM's checks
  boot                    a rank's boot phases: weights, torch.compile (its cache), KV, capture
  comm, rendezvous        NCCL/Gloo checks against sysfs; the head <-> worker channel
  tokenizer               tokens: the regex tokenizer, or a BPE one
  deepseek_v4_encoding    the chat encoding, a file an overlay replaces (sha256 logged, /metrics)
  tool_calls              the tool calls the model makes
  generation              generated text and reasoning
  gpu_load, engine        the node's GPU load file; admission, timing, counters, death
  api, anthropic          the head's request logic; /v1/messages as a chat completion request
  responses               /v1/responses as a chat completion request
  metrics                 /metrics
  http_server             the OpenAI-compatible HTTP server
  processes               the head and the headless workers
  entrypoint              main(): `vllm ...`

Environment (sim-only knobs are GX10_SIM_*; the others are read as the real stack reads them):
  GX10_SIM_BOOT_SECONDS        weight loading time on every rank (default 2)
  GX10_SIM_COMPILE_SECONDS     a cold torch.compile (default 0); a warm one (the rank's graphs in
                               $VLLM_CACHE_ROOT/torch_compile_cache) takes a twentieth of it
  GX10_SIM_CAPTURE_SECONDS     CUDA graph capture (default 0.1; none with --enforce-eager)
  GX10_SIM_HANG_PHASE          weights, compile or graph_capture: that phase never ends
  GX10_SIM_RENDEZVOUS_TIMEOUT  seconds both sides wait for each other (default 600, torch's default)
  GX10_SIM_SYSFS_ROOT          sysfs to read net and infiniband devices from (default /sys)
  GX10_SIM_GPUS_PER_NODE       visible GPUs per node (default 1, one GB10)
  GX10_SIM_TIME_SCALE          factor on simulated prefill/decode delays (default 1; 0 = instant).
                               Rates are modelled in simulated seconds: at scale S a wall second
                               is 1/S simulated seconds. /metrics exports the scale
                               (gx10_sim_info{time_scale=...}) so a client can convert; client
                               overheads grow by 1/S in simulated time, so measure rates at 1.
  GX10_SIM_HEARTBEAT_SECONDS   head/worker heartbeat period (default 1)
  GX10_SIM_PERF_MODEL          name of the timing model in PERF_MODELS (default "reference",
                               calibrated to FIELD_NOTES section 5; "simple" is the old one)
  GX10_SIM_STATE_DIR           the nvidia-smi simulator's state directory: its `locked_clocks`
                               ("MIN,MAX" MHz, written by -lgc) caps the SM clock the timing
                               model sees (default /var/lib/gx10-sim/nvidia-smi); every rank
                               writes its node's `load` there (GpuLoad: 0 idle, 0.7-1.0 while
                               sequences run; the head sends it to the workers)
  GX10_SIM_SM_CLOCK_MHZ        SM clock cap when no locked_clocks file exists (default unlocked)
  GX10_SIM_STALL_FILE          stall mode (test equipment, `gx10 lab stall`): while this file
                               exists, HTTP stays up but no engine step runs, so generation
                               produces no token (default /run/gx10-vllm-sim/stall; the head
                               removes a leftover one when it starts, as a restart ends a stall)
  GX10_SIM_BREAK               break modes of the tool-call battery (comma-separated case names,
                               breaks.py): each makes its `gx10 smoke --battery` case fail
  GX10_SIM_BREAK_FILE          more break modes, read at every request (default
                               /run/gx10-vllm-sim/break, outside the read-only /run/gx10-sim
                               mount; the head removes a leftover one when it starts)
  GX10_SIM_PREFIX_CACHE_TOKENS tokens the prefix cache remembers, least recently used out
                               (default 2097152; the cache follows --enable-prefix-caching,
                               on by default as in vLLM V1, in blocks of --block-size, default 16)
  GX10_SIM_MEM_TOTAL_GIB       the node's memory in GiB, as the GPU sees it (default: the node's
                               /proc/meminfo MemTotal). A GB10 shows about 121.6 GiB of its 128 GB
                               (FIELD_NOTES section 1); the lab inventory sets 24, the node its
                               gx10_node_memory_gib plans (the lab profile starts from 23.6)
  GX10_SIM_MEM_AVAILABLE_GIB   memory free when the engine starts, in GiB: vLLM refuses to start
                               unless gpu_memory_utilization x total is free (default: MemAvailable,
                               or the total when GX10_SIM_MEM_TOTAL_GIB is set: an idle node)
  GX10_SIM_WEIGHTS_GIB         the whole checkpoint's weights in GiB, split over tensor x pipeline
                               parallel ranks (default: the model directory's *.safetensors;
                               DeepSeek V4 Flash 0731 is 166.9 GB = 155.44 GiB, FIELD_NOTES 1)
  GX10_SIM_SPEC_ACCEPTANCE     with a --speculative-config: the draft acceptance rate the counters
                               show, accepted over proposed draft tokens
                               (vllm:spec_decode_num_accepted_tokens_total over
                               vllm:spec_decode_num_draft_tokens_total, vLLM's "Avg Draft
                               acceptance rate"); 0 to 1, default 0.85, the field's 83-87%
                               (FIELD_NOTES section 1). The first rejection ends a draft, so draft
                               position i is accepted with chance q^(i+1), q set so that the mean
                               over the k positions is this rate (engine.position_acceptance).
                               Decode speed follows tokens per step, 1 + k x rate, relative to
                               the 0.85 the timing models were calibrated at: a lower rate slows
                               decode as a badly loaded draft does on a GB10 pair
  GX10_SIM_SEED                seed mixed into every generation (default 0)
  GX10_SIM_TOKENIZER           tokenizer.json of a BPE tokenizer (default: the regex tokenizer)
  GX10_SIM_VLLM_VERSION        version string to report (default 0.11.1+gx10sim)
  VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS  collective timeout once a peer is gone (default 300)
  VLLM_API_KEY, VLLM_HOST_IP, VLLM_LOGGING_LEVEL, NCCL_*, GLOO_SOCKET_IFNAME

Tokenizer: with GX10_SIM_TOKENIZER (path to a tokenizer.json; the lab image ships a small BPE
trained at build time) the `tokenizers` package tokenizes, as a real model's tokenizer does, for
/tokenize, /detokenize, the usage counts and the prefix cache alike. Without it (the standard
library only) text is cut into pieces by TOKEN_PIECE_RE: up to 4 letters, up to 3 digits, one
other symbol, each optionally with one leading space, or a run of whitespace. Special tokens
(SPECIAL_TOKENS) are one token each either way.
"""

from .breaks import CASES as BREAK_CASES
from .cli import parse_args
from .comm import check_comm_env
from .deepseek_v4_encoding import render_chat
from .engine import Engine, PrefixCache, block_hashes
from .entrypoint import main
from .env import DEFAULT_BREAK_FILE, DEFAULT_STALL_FILE, SimEnv
from .gpu_load import GpuLoad, engine_load
from .log import Log
from .perf import PERF_MODELS, PerfModel, ReferencePerfModel, predict_case
from .tokenizer import BOS, count_tokens, tokenize, use_tokenizer
from .tool_calls import argument_fragments, plan_tool_calls, tool_arguments

__all__ = [
    "BOS",
    "BREAK_CASES",
    "DEFAULT_BREAK_FILE",
    "DEFAULT_STALL_FILE",
    "PERF_MODELS",
    "Engine",
    "GpuLoad",
    "Log",
    "PerfModel",
    "PrefixCache",
    "ReferencePerfModel",
    "SimEnv",
    "argument_fragments",
    "block_hashes",
    "check_comm_env",
    "count_tokens",
    "engine_load",
    "main",
    "parse_args",
    "plan_tool_calls",
    "predict_case",
    "render_chat",
    "tokenize",
    "tool_arguments",
    "use_tokenizer",
]
