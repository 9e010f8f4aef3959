"""``specmd calibrate`` (this machine as the real executor uses it) and ``specmd validate real``
(the simulator against the real executor)."""

from __future__ import annotations

import json
import platform
from pathlib import Path
from typing import Annotated

import typer

from specmd_sim.cli.app import app, validate_app
from specmd_sim.cli.common import JsonOpt, console
from specmd_sim.errors import SpecmdError

FolderOpt = Annotated[
    Path, typer.Option("--folder", help="Work folder: model, traces and calibrated profiles.")
]
BackendOpt = Annotated[
    str,
    typer.Option(
        "--backend",
        help="cpu (numpy), cuda (torch on a CUDA GPU) or torch-cpu (the cuda backend's code on "
        "this CPU, to check it without a GPU).",
    ),
]


def _backend(name: str) -> str:
    """Check that ``name`` is a backend whose needs this machine has (torch; a GPU for cuda);
    returns its GPU's name ('' for none)."""
    from specmd_sim.execute.device import make_device

    return make_device(name).gpu_name


def _link_bandwidth(value: str | None, backend: str) -> float:
    """``--link-bandwidth``: bytes/s of a throttle, or ``native`` (the default on cuda)."""
    from specmd_sim.execute.copies import NATIVE

    if value is None:
        return NATIVE if backend == "cuda" else 2.0e9
    if value == "native":
        return NATIVE
    try:
        bandwidth = float(value)
    except ValueError:
        bandwidth = float("nan")
    if not 0 < bandwidth < float("inf"):
        raise SpecmdError(
            f"--link-bandwidth: expected a finite number of bytes/s > 0 or 'native', got {value}"
        )
    return bandwidth


@app.command("calibrate")
def calibrate_cmd(
    backend: BackendOpt = "cpu",
    folder: FolderOpt = Path("runs/calibration"),
    model: Annotated[str, typer.Option(help="Catalog model whose shape is scaled down.")] = (
        "olmoe-1b-7b"
    ),
    scale: Annotated[int, typer.Option(help="Divide the model's widths by this.")] = 4,
    link_bandwidth: Annotated[
        str | None,
        typer.Option(
            "--link-bandwidth",
            help="Throttle of the slow tier, bytes/s, or 'native': the device's own link, "
            "measured (default: 2e9 on cpu and torch-cpu, native on cuda).",
        ),
    ] = None,
    engines: Annotated[
        int, typer.Option(help="Copy engines: copy streams (cpu: copy worker threads).")
    ] = 2,
    repeats: Annotated[int, typer.Option(help="Repeats of each microbenchmark.")] = 5,
    json_: JsonOpt = False,
) -> None:
    """Measure this machine for the real executor; write hardware.yaml and runtime.yaml."""
    import yaml

    from specmd_sim.atomic import check_output, make_folder, write_text
    from specmd_sim.execute.calibrate import calibrate
    from specmd_sim.execute.traces import write_model

    for name, value in (("--scale", scale), ("--engines", engines), ("--repeats", repeats)):
        if value < 1:
            raise SpecmdError(f"{name}: expected an integer >= 1, got {value}")
    link = _link_bandwidth(link_bandwidth, backend)
    check_output(folder, "--folder", folder=True)  # before the backend's needs (torch, a GPU)
    _backend(backend)
    make_folder(folder, "--folder")
    err = console(json_mode=True)
    cal = calibrate(model, scale, link, engines, repeats,
                    progress=lambda i, n: err.print(f"calibrate: step {i} of {n}"),
                    device=backend)  # fmt: skip
    write_model(cal.model, folder)
    for name, data in (("hardware.yaml", cal.hardware), ("runtime.yaml", cal.runtime)):
        write_text(folder / name, yaml.safe_dump(data, sort_keys=False), "--folder")
    rows = {m.name: {"value": m.value, "unit": m.unit, "spread": m.spread, "how": m.how}
            for m in cal.measures.values()}  # fmt: skip
    if json_:
        typer.echo(json.dumps(rows, indent=2))
        return
    out = console()
    for m in cal.measures.values():
        flag = "  [bold red]noisy" if m.noisy else ""
        out.print(f"{m.name:30} {m.value:12.4g} {m.unit:7} spread {m.spread:6.1%}{flag}")
    noisy = [m.name for m in cal.measures.values() if m.noisy]
    if noisy:
        out.print(f"noisy machine: {', '.join(noisy)} varied by more than 10% between repeats")
    out.print(
        f"wrote {folder / 'hardware.yaml'}, {folder / 'runtime.yaml'}, {folder / 'model.yaml'}"
    )


@validate_app.command("real")
def validate_real(
    backend: BackendOpt = "cpu",
    folder: FolderOpt = Path("runs/calibration"),
    out: Annotated[Path, typer.Option(help="Markdown report (its real-execution section).")] = (
        Path("docs/validation.md")
    ),
    quick: Annotated[bool, typer.Option("--quick", help="Two cells instead of 72.")] = False,
    repeats: Annotated[int, typer.Option(help="Executor runs per cell (median).")] = 3,
    decode_tokens: Annotated[
        int, typer.Option("--decode-tokens", help="Tokens each cell decodes after its prompt.")
    ] = 24,
    rewrite: Annotated[
        bool,
        typer.Option(
            "--rewrite",
            help="Only rewrite the report from the cells an earlier run "
            "saved in --folder (real-validation.json).",
        ),
    ] = False,
    resume: Annotated[
        bool,
        typer.Option(
            "--resume",
            help="Keep the cells an earlier run saved in --folder from the same calibration, "
            "trace and repeats; run only the others.",
        ),
    ] = False,
    json_: JsonOpt = False,
) -> None:
    """Run the executor and the simulator on the same matrix; write the comparison."""
    from specmd_sim.execute.device import check_name
    from specmd_sim.execute.traces import synthetic_trace
    from specmd_sim.models import load_model
    from specmd_sim.validate.document import check_document, write_part
    from specmd_sim.validate.real import load_rows, markdown, matrix, run_real_validation

    check_name(backend)
    check_document(out)  # before the backend's needs (torch, a GPU)
    machine = f"{platform.node() or 'this machine'} ({platform.processor() or platform.machine()})"
    command = (
        "specmd validate real"
        + (f" --backend {backend}" if backend != "cpu" else "")
        + (" --quick" if quick else "")
    )
    if rewrite:
        saved = folder / "real-validation.json"
        if not saved.is_file():
            raise SpecmdError(
                f"--rewrite: expected the cells of an earlier run in {saved}, got none"
            )
        write_part(out, backend, markdown(load_rows(saved), command, machine, backend))
        console().print(f"report: {out}")
        return
    gpu = _backend(backend)
    if gpu:
        machine += f" with {gpu}"
    for name in ("model.yaml", "hardware.yaml", "runtime.yaml"):
        if not (folder / name).is_file():
            raise SpecmdError(
                f"--folder: expected {folder / name} (run specmd calibrate --folder {folder} "
                "first), got none"
            )
    if repeats < 1:
        raise SpecmdError(f"--repeats: expected an integer >= 1, got {repeats}")
    if decode_tokens < 1:  # (a TPOT needs decoded tokens)
        raise SpecmdError(f"--decode-tokens: expected an integer >= 1, got {decode_tokens}")
    model = load_model(str(folder / "model.yaml"))
    trace = synthetic_trace(model, folder, "validate", 0, num_requests=1, prompt_tokens=16,
                            decode_tokens=decode_tokens)  # fmt: skip
    err = console(json_mode=True)

    def progress(line: str) -> None:
        err.print(line, highlight=False)

    result = run_real_validation(folder, trace, matrix(backend, quick), repeats, 0, progress,
                                 device=backend, resume=resume)  # fmt: skip
    write_part(out, backend, markdown(result, command, machine, backend))
    summary = result.summary()
    if json_:
        typer.echo(json.dumps({"summary": summary, "rows": result.rows}, default=str))
        return
    console().print(json.dumps(summary, indent=2), highlight=False)
    console().print(f"report: {out}")
