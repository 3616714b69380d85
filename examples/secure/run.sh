#!/usr/bin/env bash
# Start the secure example: three combined nodes with SASL_SSL on every listener, SCRAM-SHA-512
# users and the StandardAuthorizer (see README.md here). Makes the certificates (first run),
# formats each node with the admin's SCRAM credential (first run), starts the nodes in the
# background with their logs in $PYKRAFT_DATA/secure-N.log; Ctrl-C (or SIGTERM, or any exit)
# stops every node it started. (A script that starts run.sh with `&` makes it ignore SIGINT,
# as POSIX shells do for background commands: stop it with SIGTERM then.)
#
# usage: examples/secure/run.sh [PORT_BASE]
#   clients (SASL_SSL) on 127.0.0.1:PORT_BASE, +100, +200; controllers on +10001..+10003
# PORT_BASE (or the env var PYKRAFT_PORT_BASE; default 9092) moves every port of the configs.
# PYKRAFT_DATA is where the data, logs, certificates (secure-certs/) and the configs actually
# run go (default ./data); PYKRAFT is the pykraft command (default: this checkout's
# .venv/bin/pykraft, else pykraft on PATH).
set -euo pipefail
usage="usage: examples/secure/run.sh [PORT_BASE] (or PYKRAFT_PORT_BASE)"
here=$(cd "$(dirname "$0")" && pwd)
if [ "$#" -gt 1 ]; then
    echo "$usage" >&2
    exit 2
fi
base=${1:-${PYKRAFT_PORT_BASE:-9092}}
if ! [[ "$base" =~ ^[0-9]{1,5}$ ]] || [ "$base" -lt 1024 ] || [ "$base" -gt 55532 ]; then
    echo "run.sh: PORT_BASE must be a number from 1024 to 55532 (the highest port is" \
        "PORT_BASE+10003), got '$base'" >&2
    exit 2
fi
base=$((10#$base))
data=${PYKRAFT_DATA:-data}
pykraft=${PYKRAFT:-}
if [ -z "$pykraft" ]; then
    pykraft=pykraft
    [ -x "$here/../../.venv/bin/pykraft" ] && pykraft="$here/../../.venv/bin/pykraft"
fi
# The admin's password: the one in the configs' JAAS lines and in client.properties. The
# nodes log in to each other as admin, so the credential must exist before they start.
admin_scram='SCRAM-SHA-512=[name=admin,password=admin-secret]'

mkdir -p "$data/secure-config"
certs="$data/secure-certs"
"$here/make-certs.sh" "$certs" 3 > /dev/null
# one cluster id for every node, kept for restarts
[ -s "$data/secure.cluster-id" ] || "$pykraft" storage random-uuid > "$data/secure.cluster-id"
cluster_id=$(cat "$data/secure.cluster-id")

pids=()   # each node is the leader of its own process group (set -m below)
stop_nodes() {
    trap - EXIT INT TERM
    local pid left=()
    for pid in "${pids[@]}"; do
        kill -TERM -- "-$pid" 2>/dev/null && left+=("$pid")
    done
    for pid in "${left[@]}"; do
        # a node shuts down in seconds; one that hangs is killed after 30 s
        for _ in $(seq 300); do
            kill -0 -- "-$pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -KILL -- "-$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    echo "stopped every node"
}
trap stop_nodes EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

configs=("$here"/server-*.properties)
formats=()
for config in "${configs[@]}"; do
    name=$(basename "$config" .properties)
    # the config as it runs: ports moved by PORT_BASE, data and certificates under $data
    run_config="$data/secure-config/$name.properties"
    sed -e "s/127\.0\.0\.1:9092\b/127.0.0.1:@0@/g" -e "s/127\.0\.0\.1:9192\b/127.0.0.1:@100@/g" \
        -e "s/127\.0\.0\.1:9292\b/127.0.0.1:@200@/g" \
        -e "s/127\.0\.0\.1:19093\b/127.0.0.1:@10001@/g" \
        -e "s/127\.0\.0\.1:19094\b/127.0.0.1:@10002@/g" \
        -e "s/127\.0\.0\.1:19095\b/127.0.0.1:@10003@/g" \
        -e "s/@0@/$base/g" -e "s/@100@/$((base + 100))/g" -e "s/@200@/$((base + 200))/g" \
        -e "s/@10001@/$((base + 10001))/g" -e "s/@10002@/$((base + 10002))/g" \
        -e "s/@10003@/$((base + 10003))/g" \
        -e "s|^log\.dirs=data/|log.dirs=$data/|" \
        -e "s|^\(ssl\.[a-z]*\.location\)=certs/|\1=$certs/|" "$config" > "$run_config"
    # every node is a controller: each gets the admin's credential (whichever becomes the
    # first active controller writes it into the metadata log); formats run side by side
    "$pykraft" storage format --config "$run_config" --cluster-id "$cluster_id" \
        --add-scram "$admin_scram" --ignore-formatted &
    formats+=("$!")
done
for pid in "${formats[@]}"; do
    wait "$pid" || { echo "run.sh: storage format failed (see above)" >&2; exit 1; }
done

set -m  # background nodes get process groups of their own: stopped as a whole, and a
        # Ctrl-C in the terminal reaches this script only, which stops them in order
for config in "${configs[@]}"; do
    name=$(basename "$config" .properties)
    node=secure-${name#server-}
    "$pykraft" server start "$data/secure-config/$name.properties" > "$data/$node.log" 2>&1 &
    pids+=("$!")
    echo "started $node (pid $!), log in $data/$node.log"
done
set +m
echo "bootstrap.servers=127.0.0.1:$base,127.0.0.1:$((base + 100)),127.0.0.1:$((base + 200))"
echo "security: SASL_SSL, SCRAM-SHA-512 as admin, trust store $certs/ca.pem" \
    "(examples/secure/client.properties)"
echo "controllers: 127.0.0.1:$((base + 10001))-$((base + 10003)); Ctrl-C stops every node"
# returns when every node has exited, or at once on Ctrl-C / SIGTERM; the EXIT trap then
# stops whatever still runs
wait || true
