"""Back-to-back puts of 64-byte values on one keep-alive connection, raw HTTP/1.1 over a
socket (no HTTP library, so the client costs little): client.py PORT COUNT KEY_PREFIX [FILE].
Prints puts per second and the latency's mean, p50 and p99; with FILE, also writes one line
per put there: its start (seconds since the first put began) and its latency (seconds)."""
import json
import socket
import sys
import time

port, count, prefix = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
record = sys.argv[4] if len(sys.argv) > 4 else None
sock = socket.create_connection(("127.0.0.1", port))
sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
body = json.dumps({"value": "x" * 64}).encode()


def put(i):
    head = (f"PUT /v1/kv/{prefix}{i} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n")
    sock.sendall(head.encode() + body)
    buf = b""
    while True:
        buf += sock.recv(65536)
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            continue
        lines = buf[:end].decode().split("\r\n")
        length = next((int(l.split(":")[1]) for l in lines
                       if l.lower().startswith("content-length:")), 0)
        while len(buf) < end + 4 + length:
            buf += sock.recv(65536)
        if not lines[0].startswith("HTTP/1.1 200"):
            raise SystemExit(f"put failed: {lines[0]}")
        return


latencies, starts = [], []
started = time.perf_counter()
for i in range(count):
    t = time.perf_counter()
    put(i)
    latencies.append(time.perf_counter() - t)
    starts.append(t - started)
elapsed = time.perf_counter() - started
if record:
    with open(record, "w") as out:
        out.writelines(f"{s:.6f} {l:.6f}\n" for s, l in zip(starts, latencies))
latencies.sort()
print(f"{count / elapsed:.0f} puts/s, mean {elapsed / count * 1e3:.3f} ms, "
      f"p50 {latencies[len(latencies) // 2] * 1e3:.3f} ms, "
      f"p99 {latencies[int(len(latencies) * 0.99)] * 1e3:.3f} ms")
