"""The four-gate verification cascade: static, correctness, model, performance (VERIFY.md)."""
