"""The tail of a put latency record (lines of `start latency`, seconds, from
tools/put-timeline/client.py): analyse.py FILE. Prints percentiles (µs), the mean's excess
over the p50 with the parts the slowest tenth and hundredth add, the five slowest puts
and when they began, and the intervals between consecutive
puts among the slowest 3 %, grouped to the nearest millisecond, most common first."""
import collections
import sys

puts = [tuple(map(float, line.split())) for line in open(sys.argv[1])]
latencies = sorted(latency * 1e6 for _, latency in puts)
n = len(latencies)


def at(fraction):
    return latencies[min(n - 1, int(n * fraction))]


p50, p90 = at(0.5), at(0.9)
mean = sum(latencies) / n
print("latency (µs): " + ", ".join(
    f"p{label} {at(f):.0f}" for label, f in
    (("10", 0.1), ("50", 0.5), ("90", 0.9), ("99", 0.99), ("99.9", 0.999))) + f", mean {mean:.0f}")
p99 = at(0.99)
tenth = sum(latency - p50 for latency in latencies if latency > p90) / n
hundredth = sum(latency - p50 for latency in latencies if latency > p99) / n
print(f"mean - p50: {mean - p50:.0f} µs, of which the slowest tenth adds {tenth:.0f} µs "
      f"and the slowest hundredth {hundredth:.0f} µs")
first = puts[0][0]
slowest = sorted(puts, key=lambda put: put[1], reverse=True)[:5]
print("slowest (µs at s): " + ", ".join(
    f"{latency * 1e6:.0f} at {start - first:.2f}" for start, latency in slowest))
threshold = at(0.97)
slow = [start for start, latency in puts if latency * 1e6 > threshold]
gaps = collections.Counter(round((b - a) * 1e3) for a, b in zip(slow, slow[1:]))
print(f"{len(slow)} puts above {threshold:.0f} µs; ms between consecutive ones (count): "
      + ", ".join(f"{ms} ({count})" for ms, count in gaps.most_common(8)))
