#!/usr/bin/env bash
# Where a single-client put's time goes, from the system calls of a real 3-node cluster.
#
#   tools/put-timeline/run.sh <baton binary> [puts]
#
# Starts three `baton serve` nodes from a generated cluster file on free loopback ports
# (data in a temporary directory), warms the leader with 300 puts from a raw-socket
# client (one keep-alive connection, no HTTP library), then records every system call
# entry and exit of the three processes with `perf` (from `./.ci/bench-deps`; needs root)
# while the client does `puts` (default 3 000) back-to-back puts on the leader. Prints the
# client's rate and latency, then the per-put segments `analyse.py` finds: the leader's
# CPU before its AppendEntries leaves, each loopback hop, the follower's work around its
# flush, and the leader's from the reply to the answer. Stops only the processes it
# started, by PID.
set -euo pipefail
bin=$(realpath "$1")
puts=${2:-3000}
here=$(dirname "$(realpath "$0")")
# shellcheck source=cluster.sh
source "$here/cluster.sh"
start_cluster "$bin" cluster
port=$leader_port
python3 "$here/client.py" "$port" 300 warm > /dev/null
perf record -q -e raw_syscalls:sys_enter -e raw_syscalls:sys_exit -o "$dir/perf.data" \
    -p "$(IFS=,; echo "${pids[*]}")" -- sleep 600 > /dev/null 2>&1 &
recorder=$!
sleep 1
python3 "$here/client.py" "$port" "$puts" put
kill -INT "$recorder"; wait "$recorder" || true
perf script -i "$dir/perf.data" -F pid,tid,time,event,trace 2>/dev/null > "$dir/calls.txt"
python3 "$here/analyse.py" "$dir/calls.txt" "${pids[$((leader - 1))]}"
