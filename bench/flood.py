#!/usr/bin/env python3
"""A handshake flood and what it leaves behind: the server's RSS before, at the peak of N pending
handshakes, and after they are gone.

usage: flood.py HOST PORT N PID [SETTLE-SECONDS]
Each of the N connections sends one TLS 1.3 ClientHello (made once by Python's ssl module over a
memory BIO) and never reads or answers: the server has sent its flight and holds the handshake
until its handshake_timeout. Once all N are pending (RSS stable), all are closed; RSS is read
again after SETTLE seconds (default 5). Prints one JSON object. Needs N + 50 open files.
"""
import json
import resource
import socket
import ssl
import sys
import time


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def client_hello():
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(incoming, outgoing, server_hostname="localhost")
    try:
        obj.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return outgoing.read()


def settle(pid, seconds=10.0):
    """Waits until RSS stops growing (the server has processed what it received)."""
    last, deadline = rss_kib(pid), time.time() + seconds
    while time.time() < deadline:
        time.sleep(0.5)
        now = rss_kib(pid)
        if abs(now - last) < 256:
            return now
        last = now
    return last


def main():
    host, port, n, pid = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    after_s = float(sys.argv[5]) if len(sys.argv) > 5 else 5.0
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if hard < n + 50:
        sys.exit(f"open-files limit {hard} is below {n + 50}")
    hello = client_hello()
    before = settle(pid, 3)
    socks = []
    for _ in range(n):
        s = socket.create_connection((host, port))
        s.sendall(hello)
        socks.append(s)
    peak = settle(pid)
    for s in socks:
        s.close()
    time.sleep(after_s)
    after = rss_kib(pid)
    print(json.dumps({
        "connections": n,
        "rss_before_kib": before,
        "rss_peak_kib": peak,
        "rss_after_kib": after,
        "kib_per_pending_handshake": round((peak - before) / n, 2),
        "kept_after_kib": after - before,
        "settle_s": after_s,
    }))


if __name__ == "__main__":
    main()
