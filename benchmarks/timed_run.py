"""``specmd run`` with its run folder timed, for ``outputs_size.py``:

    python benchmarks/timed_run.py SECONDS_FILE run --config ... --out ...

is the ``specmd`` process (``process_main``) with one function wrapped: the seconds
``write_run`` takes in it (its threads, the page beside them, the modules and compiled code
they load, the memory they touch first) go into ``SECONDS_FILE``. The run folder's module is
imported first (to be wrapped), under the conditions the command imports it in: pydantic's
plug-ins not looked for (as ``process_main`` sets), the cycle collector off (as the command's
set-up has it)."""

import gc
import os
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
gc.disable()
from specmd_sim import runs  # noqa: E402

gc.enable()
from specmd_sim.cli import process_main  # noqa: E402

seconds_file, write_run = Path(sys.argv.pop(1)), runs.write_run


def timed_write_run(*args: Any, **kwargs: Any) -> Any:
    started = time.perf_counter()
    try:
        return write_run(*args, **kwargs)
    finally:
        seconds_file.write_text(repr(time.perf_counter() - started))


runs.write_run = timed_write_run
sys.argv[0] = "specmd"
process_main()
