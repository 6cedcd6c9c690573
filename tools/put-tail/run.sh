#!/usr/bin/env bash
# Which single-client puts are slow, and when: the shape of the latency's tail.
#
#   tools/put-tail/run.sh <baton binary> [puts] [spare_batch_ms]
#
# Starts a 3-node cluster of the build (tools/put-timeline/cluster.sh: free loopback ports,
# data in a temporary directory; `[raft] spare_batch_ms` set when given), warms the leader,
# then has the raw-socket client of tools/put-timeline do `puts` (default 5 000)
# back-to-back puts on the leader, recording each one's start and latency. Prints the
# client's summary, the latency's percentiles, how far the mean is above the p50 and how
# much of that the slowest tenth adds, and the time between consecutive puts among the
# slowest 3 %: a period there names what slows them (10 ms, the default batch interval of
# a spare follower, decision #136). Then, per node, its CPU per put, its time waiting for a
# CPU per put (runnable but not running: on a machine the nodes and the client share, a
# put's wake-ups queue) and its time slices per put, from /proc schedstat. Stops only the
# processes it started, by PID.
set -euo pipefail
bin=$(realpath "$1")
puts=${2:-5000}
timeline=$(dirname "$(realpath "$0")")/../put-timeline
# shellcheck source=../put-timeline/cluster.sh
source "$timeline/cluster.sh"
if [ -n "${3:-}" ]; then
    printf '[raft]\nspare_batch_ms = %s\n\n' "$3" > "$dir/tail.toml"
fi
start_cluster "$bin" tail
python3 "$timeline/client.py" "$leader_port" 500 warm- > /dev/null
# Each node's CPU, time waiting for a CPU and time slices over the measured puts, summed over
# its threads (/proc/<pid>/task/<tid>/schedstat: ns on a CPU, ns runnable but waiting, slices).
schedstat() { for p in "${pids[@]}"; do cat /proc/"$p"/task/*/schedstat | awk -v p="$p" '
    {cpu += $1; wait += $2; slices += $3} END {print p, cpu, wait, slices}'; done; }
before=$(schedstat)
python3 "$timeline/client.py" "$leader_port" "$puts" put- "$dir/puts.txt"
after=$(schedstat)
python3 "$(dirname "$(realpath "$0")")/analyse.py" "$dir/puts.txt"
paste <(echo "$before") <(echo "$after") | awk -v n="$puts" -v leader="$leader" '{
    role = (NR == leader) ? "leader" : "follower"
    printf "node %d (%s): CPU %.0f µs/put, waiting for a CPU %.0f µs/put, %.2f slices/put\n",
        NR, role, ($6 - $2) / n / 1e3, ($7 - $3) / n / 1e3, ($8 - $4) / n }'
