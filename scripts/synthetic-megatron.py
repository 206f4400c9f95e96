#!/usr/bin/env python3
"""Writes a Megatron-LM indexed dataset (PREFIX.idx + PREFIX.bin) of uniform random token ids.

For speed and memory measurements at a real vocabulary (the 8B shape's 128,256) where no corpus
tokenized with it is at hand: `mxablate data import --megatron PREFIX` turns it into a prepared
data directory. Nothing can be learnt from it; never use it for a result.

The index layout (Megatron-LM's MMapIndexedDataset, version 1): magic "MMIDIDX\\x00\\x00",
version u64, dtype code u8 (4 = int32), sequence count u64, document count u64, then int32
sizes, int64 byte pointers, int64 document boundaries (count + 1, starting at 0).

Usage: synthetic-megatron.py PREFIX --vocab V --documents D --tokens T [--seed S]
"""
import argparse
import random
import struct
import sys
from array import array


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("prefix")
    p.add_argument("--vocab", type=int, required=True)
    p.add_argument("--documents", type=int, required=True)
    p.add_argument("--tokens", type=int, required=True, help="tokens per document")
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    if not (2 <= a.vocab <= 2**31 - 1 and a.documents >= 1 and a.tokens >= 1):
        sys.exit("synthetic-megatron: --vocab in [2, 2^31), --documents and --tokens >= 1")
    rng = random.Random(a.seed)
    with open(a.prefix + ".bin", "wb") as out:
        for _ in range(a.documents):
            out.write(array("i", (rng.randrange(a.vocab) for _ in range(a.tokens))).tobytes())
    with open(a.prefix + ".idx", "wb") as idx:
        idx.write(b"MMIDIDX\x00\x00")
        idx.write(struct.pack("<QBQQ", 1, 4, a.documents, a.documents + 1))
        idx.write(array("i", [a.tokens] * a.documents).tobytes())
        idx.write(array("q", (i * a.tokens * 4 for i in range(a.documents))).tobytes())
        idx.write(array("q", range(a.documents + 1)).tobytes())
    print(f"synthetic-megatron: {a.documents} documents x {a.tokens} tokens, vocabulary {a.vocab}: {a.prefix}.idx/.bin")


if __name__ == "__main__":
    main()
