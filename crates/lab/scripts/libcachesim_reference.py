#!/usr/bin/env python3
"""Replays the `policy` scenario's traces through libCacheSim and records the miss ratios.

Usage (from the repository root, with the `libcachesim` package installed in a virtualenv):

    cargo build --release -p foliocache-lab
    python3 crates/lab/scripts/libcachesim_reference.py \
        --lab target/release/foliocache-lab \
        --out crates/lab/tests/data/libcachesim_reference.json

The lab writes the quick-size traces (`policy --quick --export DIR`) as oracleGeneral files
(every block of size 1, so a cache size in bytes is a capacity in blocks); each is replayed
through a fresh libCacheSim cache of the manifest's capacity per policy, with the package's
default parameters, and the request miss ratio is recorded in percent. The lab's test
`tests/libcachesim.rs` holds the lab's own policies to these figures.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

import libcachesim as lcs

POLICIES = {
    # lab variant name -> libCacheSim constructor
    "lru": lambda c: lcs.LRU(c),
    "arc": lambda c: lcs.ARC(c),
    "lirs": lambda c: lcs.LIRS(c),
    "s3-fifo": lambda c: lcs.S3FIFO(c),
    "w-tinylfu": lambda c: lcs.WTinyLFU(c),
    "belady-opt": lambda c: lcs.Belady(c),
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lab", required=True, help="the foliocache-lab binary")
    ap.add_argument("--out", required=True, help="the JSON file to write")
    ap.add_argument("--traces", default="", help="comma-separated trace names (default: all)")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as d:
        cmd = [args.lab, "policy", "--quick", "--export", d]
        if args.traces:
            cmd += ["--traces", args.traces]
        subprocess.run(cmd, check=True, stdout=sys.stderr)
        with open(os.path.join(d, "manifest.json")) as f:
            manifest = json.load(f)
        cap = manifest["capacity_blocks"]
        results = {}
        for t in manifest["traces"]:
            path = os.path.join(d, t["file"])
            row = {}
            for name, make in POLICIES.items():
                reader = lcs.TraceReader(path, lcs.TraceType.ORACLE_GENERAL_TRACE)
                cache = make(cap)
                miss, _byte_miss = cache.process_trace(reader)
                row[name] = round(100.0 * miss, 4)
            results[t["trace"]] = row
            print(t["trace"], row, file=sys.stderr)

    doc = {
        "produced_by": "crates/lab/scripts/libcachesim_reference.py",
        "libcachesim_version": lcs.__version__,
        "python": sys.version.split()[0],
        "size": manifest["size"],
        "seed": manifest["seed"],
        "file_blocks": manifest["file_blocks"],
        "capacity_blocks": cap,
        "metric": "request miss ratio in percent, every request counted (cold misses included)",
        "policies": {
            "lru": "LRU(cache_size)",
            "arc": "ARC(cache_size)",
            "lirs": "LIRS(cache_size): hirs_ratio 0.01, stack bounded at 2x the cache",
            "s3-fifo": "S3FIFO(cache_size): small_size_ratio 0.1, ghost_size_ratio 0.9, move_to_main_threshold 2",
            "w-tinylfu": "WTinyLFU(cache_size): window_size 0.01, main SLRU (1:4)",
            "belady-opt": "Belady(cache_size) on the oracleGeneral next-access times (admits every miss)",
        },
        "miss_ratio_pct": results,
    }
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=2, sort_keys=False)
        f.write("\n")


if __name__ == "__main__":
    main()
