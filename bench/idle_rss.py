#!/usr/bin/env python3
"""Open N idle TLS connections to HOST:PORT and report the server's RSS growth per connection.

usage: idle_rss.py HOST PORT N PID [PID...]
The PIDs are the server processes whose resident memory (VmRSS) is summed. Connections complete
the TLS handshake and then send nothing, like idle keep-alive clients.
"""
import asyncio
import ssl
import sys
import time


def rss_kib(pids):
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
    return total


async def main():
    host, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    pids = [int(p) for p in sys.argv[4:]]
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    # A warm-up connection so lazily allocated per-process state is not counted.
    r, w = await asyncio.open_connection(host, port, ssl=ctx, server_hostname="localhost")
    w.close()
    await asyncio.sleep(0.5)
    before = rss_kib(pids)
    conns = []
    sem = asyncio.Semaphore(100)

    async def one():
        async with sem:
            conns.append(await asyncio.wait_for(
                asyncio.open_connection(host, port, ssl=ctx, server_hostname="localhost"), 30))

    await asyncio.gather(*(one() for _ in range(n)))
    time.sleep(1.0)  # let the server settle (backend connects, buffers released)
    after = rss_kib(pids)
    print(f"connections={len(conns)} rss_before_kib={before} rss_after_kib={after} "
          f"per_conn_kib={(after - before) / len(conns):.1f}")
    for _, w in conns:
        w.close()


asyncio.run(main())
