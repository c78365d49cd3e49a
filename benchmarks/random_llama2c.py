#!/usr/bin/env python3
"""Writes a random-weight llama2.c checkpoint of a chosen shape (run.c's format: seven int32
header fields, then the float32 weights in run.c's order, RoPE tables included, classifier shared).

The benchmarks use it where stories260K's compute is too small to matter: a router's prefix hits
save prefill time only when prefill costs something. Weights are uniform in +-sqrt(3 / fan_in)
(unit output variance), norms 1, from a fixed seed; the text it writes is not language, but its
compute and KV footprint are those of a trained model of the same shape. Vocabulary 512, so the
stories260K tokenizer (tok512.bin) reads and prints its tokens; only its 253 merged pieces are
ever generated (see below).

Usage: /usr/bin/python3 benchmarks/random_llama2c.py OUT.bin [--dim 192] [--hidden 512]
         [--layers 6] [--heads 6] [--kv-heads 6] [--seq-len 512] [--seed 1]
"""

import argparse
import struct

import numpy as np


def write_checkpoint(path, dim=192, hidden=512, layers=6, heads=6, kv_heads=6, vocab=512, seq_len=512, seed=1):
    if dim % heads or heads % kv_heads:
        raise ValueError("dim must be a multiple of heads, heads of kv_heads")
    rng = np.random.default_rng(seed)
    head = dim // heads
    kv_dim = kv_heads * head

    def uniform(shape, fan_in):
        bound = np.sqrt(3.0 / fan_in)
        return rng.uniform(-bound, bound, size=shape).astype(np.float32)

    with open(path, "wb") as f:
        f.write(struct.pack("<7i", dim, hidden, layers, heads, kv_heads, vocab, seq_len))
        embedding = rng.uniform(-1, 1, size=(vocab, dim)).astype(np.float32)
        # The classifier is the embedding: zero rows give <unk>, BOS, EOS and the 256 byte tokens a
        # logit of 0, below the maximum of the 253 random ones, so greedy decoding never picks them.
        # (Their text is empty or a lone byte of a UTF-8 sequence, held back: a benchmark counts a
        # token by its text.) Prompts still use them as inputs.
        embedding[:259] = 0
        parts = [embedding,                                                  # token embedding
                 np.ones((layers, dim), np.float32),                         # rms_att
                 uniform((layers, dim, dim), dim),                            # wq
                 uniform((layers, kv_dim, dim), dim),                         # wk
                 uniform((layers, kv_dim, dim), dim),                         # wv
                 uniform((layers, dim, dim), dim),                            # wo
                 np.ones((layers, dim), np.float32),                         # rms_ffn
                 uniform((layers, hidden, dim), dim),                         # w1
                 uniform((layers, dim, hidden), hidden),                      # w2
                 uniform((layers, hidden, dim), dim),                         # w3
                 np.ones(dim, np.float32),                                   # rms_final
                 np.zeros((seq_len, head // 2), np.float32),                 # freq_cis_real (unused)
                 np.zeros((seq_len, head // 2), np.float32)]                 # freq_cis_imag (unused)
        for p in parts:
            f.write(np.ascontiguousarray(p).tobytes())
    params = sum(p.size for p in parts[:11])
    return params


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out")
    p.add_argument("--dim", type=int, default=192)
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--heads", type=int, default=6)
    p.add_argument("--kv-heads", type=int, default=6)
    p.add_argument("--seq-len", type=int, default=512)
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    n = write_checkpoint(a.out, a.dim, a.hidden, a.layers, a.heads, a.kv_heads, 512, a.seq_len, a.seed)
    print(f"{a.out}: {n / 1e6:.2f} M parameters")


if __name__ == "__main__":
    main()
