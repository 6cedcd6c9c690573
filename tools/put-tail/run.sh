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
# a spare follower, decision #136). Stops only the processes it started, by PID.
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
python3 "$timeline/client.py" "$leader_port" "$puts" put- "$dir/puts.txt"
python3 "$(dirname "$(realpath "$0")")/analyse.py" "$dir/puts.txt"
