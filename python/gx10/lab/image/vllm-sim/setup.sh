#!/bin/sh
# Runs once inside the image while it is built: `vllm` on PATH, as in the real image (a link to
# the script beside the vllm_sim package, which Python then finds first on sys.path), and the
# simulator's BPE tokenizer trained from the shipped corpus (GX10_SIM_TOKENIZER points at it).
set -eu
lib=/usr/local/lib/gx10-sim
chmod 0755 "$lib/vllm"
ln -sf "$lib/vllm" /usr/local/bin/vllm
python3 "$lib/train_tokenizer.py" "$lib/tokenizer-corpus.txt" /usr/local/share/gx10-sim/tokenizer.json
