#!/usr/bin/env bash
# Two baton builds side by side: which one answers a single client's puts sooner.
#
#   tools/put-ab/run.sh <baton binary A> <baton binary B> [rounds] [puts]
#
# Starts a 3-node cluster of each build at once (generated cluster files, free loopback
# ports, data in a temporary directory), warms both leaders, then runs `rounds` (default
# 20) rounds in which the raw-socket client of `tools/put-timeline` does `puts` (default
# 2 000) back-to-back puts on one leader and then on the other, the order alternating.
# This machine's speed drifts by 10-20 % within minutes, so builds measured one after the
# other differ by more than most changes do; rounds taken side by side cancel the drift.
# Prints each round and, per build, the median of the rounds' p50 latency and rate, and in
# how many rounds B's p50 was lower. Stops only the processes it started, by PID.
set -euo pipefail
bins=("$(realpath "$1")" "$(realpath "$2")")
rounds=${3:-20}
puts=${4:-2000}
timeline=$(dirname "$(realpath "$0")")/../put-timeline
client=$timeline/client.py
# shellcheck source=../put-timeline/cluster.sh
source "$timeline/cluster.sh"
leaders=()
for side in 0 1; do
    start_cluster "${bins[$side]}" "side$side"
    leaders+=("$leader_port")
    python3 "$client" "$leader_port" 500 warm > /dev/null
done
for round in $(seq "$rounds"); do
    order="0 1"
    [ $((round % 2)) -eq 0 ] && order="1 0"
    for side in $order; do
        name=$([ "$side" -eq 0 ] && echo A || echo B)
        echo "$name $(python3 "$client" "${leaders[$side]}" "$puts" "r${round}-")"
    done
done | tee "$dir/rounds.txt"
python3 - "$dir/rounds.txt" <<'PY'
import re, statistics, sys
p50 = {"A": [], "B": []}
rate = {"A": [], "B": []}
for line in open(sys.argv[1]):
    m = re.match(r"(\w) (\d+) puts/s, .* p50 ([\d.]+) ms", line)
    p50[m.group(1)].append(float(m.group(3)))
    rate[m.group(1)].append(int(m.group(2)))
for side in "AB":
    print(f"{side}: p50 median {statistics.median(p50[side]):.3f} ms, "
          f"rate median {statistics.median(rate[side]):.0f} puts/s")
wins = sum(1 for a, b in zip(p50["A"], p50["B"]) if b < a)
print(f"B's p50 lower in {wins} of {len(p50['A'])} rounds")
PY
