"""``make bench``, its harness (``benchmarks.harness``) and the proofs: run from a checkout, never installed."""
