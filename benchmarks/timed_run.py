"""``specmd run`` with its run folder timed, for ``outputs_size.py``:

    python benchmarks/timed_run.py SECONDS_FILE run --config ... --out ...

is the ``specmd`` process (``process_main``) with one function wrapped: the seconds
``write_run`` takes in it (its threads, the page beside them, the modules and compiled code
they load, the memory they touch first) go into ``SECONDS_FILE``. The run folder's module is
imported first (to be wrapped), under the conditions the command imports it in: the process
prepared as ``process_main`` prepares it (``prepare_process``: pydantic's plug-ins not looked
for, the allocator's settings, numpy's huge pages), the cycle collector off (as the command's
set-up has it)."""

import gc
import sys
import time
from pathlib import Path
from typing import Any

from specmd_sim.cli import prepare_process, process_main

seconds_file = Path(sys.argv.pop(1))
prepare_process(sys.argv[1:])
gc.disable()
from specmd_sim import runs  # noqa: E402

gc.enable()
write_run = runs.write_run


def timed_write_run(*args: Any, **kwargs: Any) -> Any:
    started = time.perf_counter()
    try:
        return write_run(*args, **kwargs)
    finally:
        seconds_file.write_text(repr(time.perf_counter() - started))


runs.write_run = timed_write_run
sys.argv[0] = "specmd"
process_main()
