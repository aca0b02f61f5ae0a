"""Running and timing kernels and whole models: the one harness every number comes from."""
