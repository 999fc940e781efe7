#!/usr/bin/env python3
"""An idle hog: one source address opens up to N TLS connections, completes each handshake and
holds them all silent, until killed.

usage: hog.py HOST PORT SOURCE N [READY-FILE]
Connections are opened from SOURCE (any of 127.0.0.0/8 on Linux), 64 handshakes at a time; one
the server refuses or closes is counted and not retried. Once every attempt has ended, prints
one JSON line ({"held": H, "refused": R}) and writes it to READY-FILE when given, then sleeps.
Needs N + 50 open files.
"""
import concurrent.futures
import json
import resource
import socket
import ssl
import sys
import time


def main():
    host, port, source, n = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    ready = sys.argv[5] if len(sys.argv) > 5 else None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, n + 100), hard))
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE

    def one(_):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            s.bind((source, 0))
            s.settimeout(10)
            s.connect((host, port))
            t = ctx.wrap_socket(s, server_hostname="localhost")
            t.settimeout(None)
            return t
        except (OSError, ssl.SSLError):
            s.close()
            return None

    with concurrent.futures.ThreadPoolExecutor(64) as pool:
        conns = list(pool.map(one, range(n)))
    held = [c for c in conns if c is not None]
    line = json.dumps({"held": len(held), "refused": n - len(held)})
    print(line, flush=True)
    if ready:
        with open(ready, "w") as f:
            f.write(line + "\n")
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main()
