"""kernelopt-bot: verified Triton kernel replacements for torch.compile'd models.

Importing the package imports nothing heavy: the production runtime
(:mod:`kernelopt_bot.pack.runtime`) needs torch and triton only.
"""

from __future__ import annotations

__version__ = "0.1.0"
