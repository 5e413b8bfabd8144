#!/bin/bash
# Requests/s through vsr to one fakellm reached two ways, in interleaved
# rounds: model h1 over HTTP/1.1 (a keep-alive pool), model h2 over HTTP/2
# (streams on shared connections).  vsr has 1 worker, fakellm 1 thread.
#   BUILD=/tmp/rel bench/upstream_h2.sh     (a RelWithDebInfo build)
# Environment: BUILD (default build), ROUNDS (3), SECONDS (4), CONNS (64).
set -euo pipefail
B=${BUILD:-build}
ROUNDS=${ROUNDS:-3}
SECS=${SECONDS_PER_RUN:-4}
CONNS=${CONNS:-64}
T=$(mktemp -d)
trap 'kill $V $FK 2>/dev/null; wait 2>/dev/null; rm -rf "$T"' EXIT
free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
cat > "$T/post.lua" <<'EOL'
wrk.method = "POST"
wrk.headers["content-type"] = "application/json"
wrk.body = '{"model":"' .. os.getenv("MODEL") .. '","messages":[{"role":"user","content":"hello there"}]}'
EOL
"$B/fakellm" --port 0 --port-file "$T/fk.port" --name fk --threads 1 > "$T/fk.log" 2>&1 & FK=$!
while [ ! -s "$T/fk.port" ]; do sleep 0.05; done
FP=$(cat "$T/fk.port"); VP=$(free_port)
cat > "$T/cfg.yaml" <<EOC
version: v0.3
listeners:
  - {name: main, address: 127.0.0.1, port: $VP}
providers:
  models:
    - {name: h1, backend_refs: [{endpoint: "127.0.0.1:$FP"}]}
    - {name: h2, backend_refs: [{endpoint: "127.0.0.1:$FP", protocol: h2}]}
global:
  services:
    management_api: {port: $(free_port)}
EOC
"$B/vsr" serve --config "$T/cfg.yaml" --workers 1 --metrics-listen off > "$T/vsr.log" 2>&1 & V=$!
sleep 1
URL=http://127.0.0.1:$VP/v1/chat/completions
for m in h1 h2; do MODEL=$m wrk -t1 -c"$CONNS" -d1s -s "$T/post.lua" "$URL" > /dev/null; done  # warm-up
for round in $(seq "$ROUNDS"); do
  for m in h1 h2; do
    out=$(MODEL=$m wrk -t1 -c"$CONNS" -d"${SECS}s" -s "$T/post.lua" "$URL")
    echo "round $round $m: $(echo "$out" | grep -E 'Requests/sec' | tr -s ' ') $(echo "$out" | grep -E 'Non-2xx|errors' | tr '\n' ' ')"
  done
done
