#!/usr/bin/env bash
# Format and start a cluster from one of the config sets in this directory, each node in the
# background with its log in $PYKRAFT_DATA/<name>.log; Ctrl-C (or SIGTERM, or any exit) stops
# every node it started. (A script that starts run.sh with `&` makes it ignore SIGINT, as
# POSIX shells do for background commands: stop it with SIGTERM then.)
#
# usage: examples/cluster/run.sh combined|dedicated [PORT_BASE]
#   combined   3 combined nodes: clients on PORT_BASE, +100, +200; controllers on +10001..+10003
#   dedicated  3 controllers + 1 broker: clients on PORT_BASE; controllers on +10001..+10003
# PORT_BASE (or the env var PYKRAFT_PORT_BASE; default 9092) moves every port of the example
# configs: with 9092 the nodes listen where the configs say (clients 127.0.0.1:9092, 9192,
# 9292; controllers 127.0.0.1:19093-19095). PYKRAFT_DATA is where the data, logs and the
# configs actually run go (default ./data); PYKRAFT is the pykraft command (default: this
# checkout's .venv/bin/pykraft, else pykraft on PATH).
set -euo pipefail
usage="usage: examples/cluster/run.sh combined|dedicated [PORT_BASE] (or PYKRAFT_PORT_BASE)"
here=$(cd "$(dirname "$0")" && pwd)
shape=${1:-}
if [ -z "$shape" ] || [ ! -d "$here/$shape" ] || [ "$#" -gt 2 ]; then
    echo "$usage" >&2
    exit 2
fi
base=${2:-${PYKRAFT_PORT_BASE:-9092}}
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

mkdir -p "$data/$shape-config"
# one cluster id for every node, kept for restarts
[ -s "$data/$shape.cluster-id" ] || "$pykraft" storage random-uuid > "$data/$shape.cluster-id"
cluster_id=$(cat "$data/$shape.cluster-id")

pids=()   # each node is the leader of its own process group (set -m below)
names=()
stop_nodes() {
    trap - EXIT INT TERM
    # broker-only nodes first: their controlled shutdown needs the controllers running
    local i pid left deadline
    for pass in broker other; do
        left=()
        for i in "${!pids[@]}"; do
            pid=${pids[$i]}
            case "${names[$i]}" in broker*) [ "$pass" = broker ] || continue ;;
                *) [ "$pass" = other ] || continue ;; esac
            kill -TERM -- "-$pid" 2>/dev/null && left+=("$pid")
        done
        # a node shuts down in seconds; those that hang are killed 30 s after they were
        # told to stop (by the clock: on a loaded machine 300 turns of a 0.1 s sleep took
        # twice as long)
        deadline=$((SECONDS + 30))
        for pid in "${left[@]}"; do
            while kill -0 -- "-$pid" 2>/dev/null && [ "$SECONDS" -lt "$deadline" ]; do
                sleep 0.1
            done
            kill -KILL -- "-$pid" 2>/dev/null || true
            wait "$pid" 2>/dev/null || true
        done
    done
    echo "stopped every node"
}
trap stop_nodes EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

configs=("$here/$shape"/*.properties)
formats=()
for config in "${configs[@]}"; do
    name=$(basename "$config" .properties)
    # the config as it runs: the example's ports moved by PORT_BASE, its data under $data
    run_config="$data/$shape-config/$name.properties"
    sed -e "s/127\.0\.0\.1:9092\b/127.0.0.1:@0@/g" -e "s/127\.0\.0\.1:9192\b/127.0.0.1:@100@/g" \
        -e "s/127\.0\.0\.1:9292\b/127.0.0.1:@200@/g" \
        -e "s/127\.0\.0\.1:19093\b/127.0.0.1:@10001@/g" \
        -e "s/127\.0\.0\.1:19094\b/127.0.0.1:@10002@/g" \
        -e "s/127\.0\.0\.1:19095\b/127.0.0.1:@10003@/g" \
        -e "s/@0@/$base/g" -e "s/@100@/$((base + 100))/g" -e "s/@200@/$((base + 200))/g" \
        -e "s/@10001@/$((base + 10001))/g" -e "s/@10002@/$((base + 10002))/g" \
        -e "s/@10003@/$((base + 10003))/g" \
        -e "s|^log\.dirs=data/|log.dirs=$data/|" "$config" > "$run_config"
    # the nodes' formats run side by side: each is a Python start-up of a second or more
    "$pykraft" storage format --config "$run_config" --cluster-id "$cluster_id" \
        --ignore-formatted &
    formats+=("$!")
done
for pid in "${formats[@]}"; do
    wait "$pid" || { echo "run.sh: storage format failed (see above)" >&2; exit 1; }
done

set -m  # background nodes get process groups of their own: stopped as a whole, and a
        # Ctrl-C in the terminal reaches this script only, which stops them in order
for config in "${configs[@]}"; do
    name=$(basename "$config" .properties)
    "$pykraft" server start "$data/$shape-config/$name.properties" > "$data/$name.log" 2>&1 &
    pids+=("$!")
    names+=("$name")
    echo "started $name (pid $!), log in $data/$name.log"
done
set +m
if [ "$shape" = combined ]; then
    echo "bootstrap.servers=127.0.0.1:$base,127.0.0.1:$((base + 100)),127.0.0.1:$((base + 200))"
else
    echo "bootstrap.servers=127.0.0.1:$base"
fi
echo "controllers: 127.0.0.1:$((base + 10001))-$((base + 10003)); Ctrl-C stops every node"
# until every node has exited, or at once on Ctrl-C / SIGTERM; the EXIT trap then stops
# whatever still runs (killing one node, say the active controller, stops only it). A
# one-second wait at a time: a signal that one `wait` missed is acted on at the next (bash
# runs a trap that came in while it waited, at the latest when that wait ends)
while :; do
    alive=0
    for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    [ "$alive" = 1 ] || break
    sleep 1 </dev/null >/dev/null 2>&1 &
    wait "$!" || true
done
