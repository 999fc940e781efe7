#!/usr/bin/env python3
"""Writes the inputs of tests/data/proxy-protocol-vectors.txt as a libFuzzer seed corpus.

Usage (from crates/shuck-proxy): python3 fuzz/seed-corpus.py [OUT_DIR]   (default fuzz/corpus/decode)
Parses the file the way proxy_protocol::vectors does: blank-line separated blocks, first line the
expectation, an optional "tlvs" line, then hex lines ('CRC' = a computed CRC32C) or one quoted line.
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
VECTORS = os.path.join(HERE, "..", "tests", "data", "proxy-protocol-vectors.txt")


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def unescape(quoted):
    s = quoted.strip().strip('"')
    out, i = bytearray(), 0
    while i < len(s):
        c = s[i]
        if c != "\\":
            out.append(ord(c))
            i += 1
        elif s[i + 1] == "x":
            out.append(int(s[i + 2 : i + 4], 16))
            i += 4
        else:
            out.append({"r": 13, "n": 10}[s[i + 1]])
            i += 2
    return bytes(out)


def inputs():
    blocks, block = [], []
    for no, raw in enumerate(open(VECTORS, encoding="utf-8").read().splitlines() + [""], 1):
        content = raw.split("#")[0].strip()
        if not raw.strip():
            if block:
                blocks.append(block)
            block = []
        elif content:
            block.append((no, content))
    for block in blocks:
        line, rest = block[0][0], block[1:]
        if rest and rest[0][1].startswith("tlvs "):
            rest = rest[1:]
        data, crc_at = bytearray(), None
        for _, l in rest:
            if l.startswith('"'):
                data += unescape(l)
                continue
            for tok in l.split():
                if tok == "CRC":
                    crc_at = len(data)
                    data += bytes(4)
                else:
                    data.append(int(tok, 16))
        if crc_at is not None:
            data[crc_at : crc_at + 4] = crc32c(data).to_bytes(4, "big")
        yield line, bytes(data)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "corpus", "decode")
    os.makedirs(out, exist_ok=True)
    n = 0
    for line, data in inputs():
        with open(os.path.join(out, "vector-line-%03d" % line), "wb") as f:
            f.write(data)
        n += 1
    print("wrote %d seed inputs to %s" % (n, out))


if __name__ == "__main__":
    main()
