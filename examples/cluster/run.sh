#!/bin/sh
# Format and start a cluster from one of the config sets in this directory, each node in the
# background with its log in data/<name>.log; Ctrl-C stops them all.
#   examples/cluster/run.sh combined     # 3 combined nodes: bootstrap 127.0.0.1:9092,9192,9292
#   examples/cluster/run.sh dedicated    # 3 controllers + 1 broker: bootstrap 127.0.0.1:9092
set -eu
shape=${1:?usage: run.sh combined|dedicated}
here=$(cd "$(dirname "$0")" && pwd)
pykraft=${PYKRAFT:-pykraft}
mkdir -p data
# one cluster id for every node, kept for restarts
[ -f "data/$shape.cluster-id" ] || $pykraft storage random-uuid > "data/$shape.cluster-id"
cluster_id=$(cat "data/$shape.cluster-id")
pids=""
for config in "$here/$shape"/*.properties; do
    name=$(basename "$config" .properties)
    $pykraft storage format --config "$config" --cluster-id "$cluster_id" --ignore-formatted
    $pykraft server start "$config" > "data/$name.log" 2>&1 &
    pids="$pids $!"
    echo "started $name (pid $!), log in data/$name.log"
done
trap 'kill $pids 2>/dev/null; wait' INT TERM
wait
