"""``python -m specmd_sim`` is the ``specmd`` command."""

from specmd_sim.cli import process_main

process_main()
