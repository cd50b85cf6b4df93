#!/usr/bin/env python3
"""The disk's flushes under each way PostgreSQL can flush its WAL (docs/benchmarks.md, issue 12).

8 KiB writes at moving offsets of a 16 MiB file in FOLDER, for SECONDS each, flushed with
write + fdatasync (wal_sync_method=fdatasync, the default), O_DSYNC (open_datasync) and
O_DIRECT|O_DSYNC; ROUNDS rounds of the three in turn. Prints each one's p50, p99, p99.9, slowest
flush and flushes over 20 ms. pg_test_fsync reports only averages, which hide the stalls.

usage: scripts/flush-methods.py [FOLDER] [ROUNDS] [SECONDS]   (defaults: . 3 10)
"""
import mmap
import os
import sys
import time

SEGMENT = 16 * 1024 * 1024


def run(folder, mode, seconds):
    path = os.path.join(folder, f"flush-methods-{mode}.dat")
    flags = os.O_RDWR | os.O_CREAT
    if mode == "O_DSYNC":
        flags |= os.O_DSYNC
    elif mode == "O_DIRECT|O_DSYNC":
        flags |= os.O_DSYNC | os.O_DIRECT
    fd = os.open(path, flags, 0o600)
    try:
        os.ftruncate(fd, SEGMENT)
        block = mmap.mmap(-1, 8192)  # page-aligned, as O_DIRECT needs
        block.write(b"x" * 8192)
        latencies, offset, end = [], 0, time.monotonic() + seconds
        while time.monotonic() < end:
            start = time.monotonic()
            os.pwrite(fd, block, offset)
            if mode == "fdatasync":
                os.fdatasync(fd)
            latencies.append((time.monotonic() - start) * 1000)
            offset = (offset + 8192) % SEGMENT
    finally:
        os.close(fd)
        os.unlink(path)
    latencies.sort()
    n = len(latencies)
    print(
        f"{mode:17s} {n:7d} flushes  p50 {latencies[n // 2]:.3f} ms  p99 {latencies[n * 99 // 100]:.3f} ms  "
        f"p99.9 {latencies[n * 999 // 1000]:.3f} ms  slowest {latencies[-1]:.1f} ms  over 20 ms: {sum(1 for x in latencies if x > 20)}",
        flush=True,
    )


def main():
    folder = sys.argv[1] if len(sys.argv) > 1 else "."
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    seconds = float(sys.argv[3]) if len(sys.argv) > 3 else 10
    for _ in range(rounds):
        for mode in ("fdatasync", "O_DSYNC", "O_DIRECT|O_DSYNC"):
            run(folder, mode, seconds)


if __name__ == "__main__":
    main()
