#!/usr/bin/env bash
# The text the pruned draft head's token ranking is counted from: the default target's own
# greedy replies to crates/engine/data/corpus-prompts.txt (code and prose, none of them the
# bench prompts, so measured acceptance is not flattered). Writes
# crates/engine/data/draft-corpus.txt; about 10 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
models="${SPECULA_MODELS_DIR:-$HOME/.cache/specula/models}"
target="$models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
cargo build --quiet --release -p specula-cli
specula="${CARGO_TARGET_DIR:-target}/release/specula"
out=crates/engine/data/draft-corpus.txt
: > "$out"
while IFS= read -r prompt; do
    [ -n "$prompt" ] || continue
    "$specula" generate --model "$target" --prompt "$prompt" --mode greedy --max-tokens 200 \
        --device cpu --json 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["text"])' >> "$out"
    printf '\n' >> "$out"
done < crates/engine/data/corpus-prompts.txt
wc -c "$out"
