"""Per-put segments from `perf script` output of raw_syscalls enter/exit events of a
3-node cluster: analyse.py CALLS LEADER_PID. The needed follower is the other node that
flushed most; file descriptors are told apart by their use (the leader reads the client
and the follower's replies; its writes on the link to the follower are read by the
follower next, its writes to the untraced client are not)."""
import collections
import re
import sys

RECVFROM, WRITEV, PWRITE, FDATASYNC, EPOLL_WAIT = 45, 20, 18, 75, 232

path, leader = sys.argv[1], sys.argv[2]
pending, calls = {}, []  # calls: (pid, nr, fd, entered µs, exited µs, return value)
pattern = re.compile(r"\s*(\d+)/(\d+)\s+([\d.]+):\s+raw_syscalls:sys_(enter|exit):\s+NR (\d+) (.*)")
for line in open(path):
    m = pattern.match(line)
    if not m:
        continue
    pid, tid, t, kind, nr, rest = m.groups()
    t, nr = float(t) * 1e6, int(nr)
    if kind == "enter":
        pending[tid] = (nr, rest.strip("()").split(",")[0].strip(), t)
    elif tid in pending and pending[tid][0] == nr:
        _, fd, entered = pending.pop(tid)
        calls.append((pid, nr, fd, entered, t, int(rest.split("=")[1])))
calls.sort(key=lambda c: c[3])

flushes = collections.Counter(c[0] for c in calls if c[1] == FDATASYNC and c[0] != leader)
follower = flushes.most_common(1)[0][0]
follower_fd = collections.Counter(
    c[2] for c in calls if c[0] == follower and c[1] == RECVFROM and c[5] > 0).most_common(1)[0][0]
leader_reads = collections.Counter(c[2] for c in calls if c[0] == leader and c[1] == RECVFROM and c[5] > 0)
candidates = [fd for fd, _ in leader_reads.most_common(2)]
# The leader's link to the follower is the fd whose writes the follower reads next; the
# client is not traced, so its connection is the other one.
echoed = collections.Counter()
for i, c in enumerate(calls):
    if c[0] == leader and c[1] == WRITEV and c[2] in candidates:
        for d in calls[i + 1:i + 40]:
            if d[0] == follower and d[1] == RECVFROM and d[2] == follower_fd and d[5] > 0:
                echoed[c[2]] += 1
                break
peer_fd = max(candidates, key=lambda fd: echoed[fd])
client_fd = next(fd for fd in candidates if fd != peer_fd)


def after(i, want, within=400):
    for j in range(i + 1, min(i + within, len(calls))):
        if want(calls[j]):
            return calls[j]
    return None


def is_call(pid, nr, fd=None):
    return lambda c: c[0] == pid and c[1] == nr and (fd is None or c[2] == fd)


segments = collections.defaultdict(list)
for i, (pid, nr, fd, entered, exited, ret) in enumerate(calls):
    if pid == leader and nr == RECVFROM and fd == client_fd and ret > 0:
        sent = after(i, is_call(leader, WRITEV, peer_fd))
        answered = after(i, is_call(leader, WRITEV, client_fd))
        if sent and answered and sent[3] < answered[3]:
            segments["leader: request read -> AppendEntries written"].append(sent[3] - exited)
            segments["leader: request read -> answer written"].append(answered[3] - exited)
        own = after(i, is_call(leader, FDATASYNC))
        if own and answered and own[3] < answered[3]:
            segments["leader: request read -> its own fdatasync begins"].append(own[3] - exited)
            segments["leader: its own fdatasync"].append(own[4] - own[3])
    elif pid == leader and nr == RECVFROM and fd == peer_fd and ret > 0:
        answered = after(i, is_call(leader, WRITEV, client_fd))
        if answered:
            segments["leader: reply read -> answer written"].append(answered[3] - exited)
    elif pid == follower and nr == RECVFROM and fd == follower_fd and ret > 0:
        written = after(i, is_call(follower, PWRITE))
        if written:
            segments["follower: AppendEntries read -> log write"].append(written[3] - exited)
    elif pid == follower and nr == FDATASYNC:
        segments["follower: its fdatasync"].append(exited - entered)
        replied = after(i, is_call(follower, WRITEV, follower_fd))
        if replied:
            segments["follower: fdatasync done -> reply written"].append(replied[3] - exited)
    if nr == WRITEV and ((pid == leader and fd == peer_fd) or (pid == follower and fd == follower_fd)):
        name = "hop leader -> follower" if pid == leader else "hop follower -> leader"
        other, other_fd = (follower, follower_fd) if pid == leader else (leader, peer_fd)
        read = after(i, lambda c: c[0] == other and c[1] == RECVFROM and c[2] == other_fd and c[5] > 0)
        segments[name + ": the writev itself"].append(exited - entered)
        if read:
            segments[name + ": writev begins -> read done"].append(read[4] - entered)

print(f"leader {leader}, follower {follower}; fds: client {client_fd}, "
      f"leader's link {peer_fd}, follower's {follower_fd}")
print(f"{'segment (µs)':<52} {'n':>6} {'p10':>6} {'p50':>6} {'p90':>6}")
for name, values in segments.items():
    values.sort()
    n = len(values)
    print(f"{name:<52} {n:>6} {values[n // 10]:>6.0f} {values[n // 2]:>6.0f} {values[n * 9 // 10]:>6.0f}")
