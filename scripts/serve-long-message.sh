#!/usr/bin/env bash
# Peak memory of `specula serve` answering one 7.5 MiB chat message (issue 65, item 2).
set -euo pipefail
T=~/.cache/specula/models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf
BIN=${1:-target/release/specula}
PORT=18777
$BIN serve --model $T --port $PORT >/tmp/serve-mem.log 2>&1 &
PID=$!
trap 'kill $PID 2>/dev/null || true' EXIT
for i in $(seq 120); do curl -sf http://127.0.0.1:$PORT/health >/dev/null && break; sleep 1; done
python3 - <<'PY'
import json
line = "The keeper logs the weather at dawn, noon and dusk, and the ships that pass the point.\n"
text = line * ((15 << 19) // len(line))
json.dump({"model": "qwen2.5-coder-1.5b-instruct-q4_k_m", "max_tokens": 4, "messages": [{"role": "user", "content": text}]}, open("/tmp/big-request.json", "w"))
PY
ls -la /tmp/big-request.json | awk '{print "request bytes", $5}'
grep -E 'VmRSS|VmHWM' /proc/$PID/status | tr -s ' ' | sed 's/^/idle /'
curl -s -o /tmp/big-answer.json -w 'status %{http_code} in %{time_total}s\n' -H 'content-type: application/json' --data-binary @/tmp/big-request.json http://127.0.0.1:$PORT/v1/chat/completions
head -c 300 /tmp/big-answer.json; echo
grep -E 'VmRSS|VmHWM' /proc/$PID/status | tr -s ' ' | sed 's/^/after /'
