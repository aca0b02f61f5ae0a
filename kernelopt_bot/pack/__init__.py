"""Kernel packs and the runtime that applies them (torch and triton only)."""
