"""The typer application and its command groups; commands register themselves in the modules
of this package."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="specmd",
    help="Simulate MoE inference with expert offloading: caches, prefetchers, hardware.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
hardware_app = typer.Typer(help="Hardware profiles.", no_args_is_help=True)
models_app = typer.Typer(help="The model catalog.", no_args_is_help=True)
trace_app = typer.Typer(help="Routing traces.", no_args_is_help=True)
policies_app = typer.Typer(help="Registered policies and predictors.", no_args_is_help=True)
runtimes_app = typer.Typer(help="Runtime profiles (software stacks).", no_args_is_help=True)
validate_app = typer.Typer(
    help="Compare the simulator with measurements of real systems.", no_args_is_help=True
)
app.add_typer(hardware_app, name="hardware")
app.add_typer(runtimes_app, name="runtimes")
app.add_typer(validate_app, name="validate")
app.add_typer(models_app, name="models")
app.add_typer(trace_app, name="trace")
app.add_typer(policies_app, name="policies")
