"""One process run and measured from outside, for the whole-process benchmarks."""

from __future__ import annotations

import os
import subprocess
import tempfile
import time


def timed(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, float, str]:
    """(wall seconds, peak RSS MiB by ``os.wait4``, stdout) of ``cmd``; exits with its error
    output if it fails."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, text=True, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        out.seek(0)
        err.seek(0)
        if code := os.waitstatus_to_exitcode(status):
            raise SystemExit(f"{' '.join(cmd[1:5])}... failed ({code}): {err.read()[-800:]}")
        return wall, usage.ru_maxrss / 1024, out.read()
