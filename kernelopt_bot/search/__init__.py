"""Search: proposing candidates for the kernels the profile ranks worth it."""
