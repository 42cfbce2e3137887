#!/usr/bin/env python3
"""A stand-in for Llama 3's tokenizer.model, for benchmarks/gpu/run.sh.

The lent GPU machines have no internet and Meta's tokenizer is gated, yet the
1B and 8B shapes need Llama 3's vocabulary size: 128,000 base tokens + 256
special tokens = 128,256, which sets the embedding and output sizes and so
the step's cost. This writes a tiktoken-format file ("<base64 bytes> <rank>"
per line) with the 256 single bytes and then letter/space n-grams up to
128,000 tokens. What the tokens are does not change a step's cost at a fixed
sequence length; only the vocabulary size does.

Usage: synthetic_tokenizer.py OUT_FILE [BASE_VOCAB]   (default 128000)
"""
import base64
import itertools
import sys


def tokens(base_vocab):
    yield from (bytes([b]) for b in range(256))
    count = 256
    alphabet = b" etaoinshrdlucmfwypvbgkjqxz"
    for n in itertools.count(2):
        for combo in itertools.product(alphabet, repeat=n):
            if count == base_vocab:
                return
            yield bytes(combo)
            count += 1


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    base_vocab = int(sys.argv[2]) if len(sys.argv) == 3 else 128000
    with open(sys.argv[1], "w") as out:
        for rank, token in enumerate(tokens(base_vocab)):
            out.write(f"{base64.b64encode(token).decode()} {rank}\n")


if __name__ == "__main__":
    main()
