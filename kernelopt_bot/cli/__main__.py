"""``python -m kernelopt_bot.cli``: how the tests, the Action and the engine's own subprocesses
(the suite's and the fleet's ``optimize`` jobs) run the CLI, with no console script on PATH."""

from __future__ import annotations

from kernelopt_bot.cli import main

if __name__ == "__main__":  # pragma: no cover
    main()
