# Sourced by `tools/put-timeline/run.sh` and `tools/put-ab/run.sh`: 3-node clusters of a
# baton build on free loopback ports, with their data in one temporary directory, and
# stopped by PID when the script exits.
#
# Defines `dir` (the temporary directory), `pids` (every process started, in order) and
# `start_cluster <binary> <name>`, which starts nodes 1-3 from `$dir/<name>.toml` and sets
# `leader` (the leader's node id) and `leader_port` (its client port).
dir=$(mktemp -d)
pids=()
cleanup() {
    [ ${#pids[@]} -gt 0 ] && kill "${pids[@]}" 2>/dev/null || true
    wait 2>/dev/null || true
    rm -rf "$dir"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
start_cluster() {
    local bin=$1 name=$2 id api peer
    local apis=()
    for id in 1 2 3; do
        api=$(free_port); peer=$(free_port); apis+=("$api")
        printf '[[node]]\nid = %s\napi = "127.0.0.1:%s"\npeer = "127.0.0.1:%s"\ndata_dir = "%s/%s/n%s"\n\n' \
            "$id" "$api" "$peer" "$dir" "$name" "$id" >> "$dir/$name.toml"
    done
    for id in 1 2 3; do
        RUST_LOG=warn "$bin" serve --config "$dir/$name.toml" --node "$id" > "$dir/$name-log$id" 2>&1 &
        pids+=($!)
    done
    leader=""
    for _ in $(seq 100); do
        leader=$(curl -sf "127.0.0.1:${apis[0]}/v1/cluster" \
            | python3 -c 'import json,sys; print(json.load(sys.stdin).get("leader") or "")' 2>/dev/null || true)
        [ -n "$leader" ] && break
        sleep 0.1
    done
    [ -n "$leader" ] || { echo "no leader for $bin" >&2; exit 1; }
    leader_port=${apis[$((leader - 1))]}
}
