"""Hardware: profile schema, YAML loading, and the topology graph that transfers follow."""

from specmd_sim.hardware.loader import list_profiles, load_profile
from specmd_sim.hardware.schema import HardwareProfile, lowest_grade
from specmd_sim.hardware.topology import (
    Hop,
    TransferPath,
    build_graph,
    find_path,
    host_path,
    transfer_path,
    write_back_path,
)

__all__ = [
    "HardwareProfile",
    "Hop",
    "TransferPath",
    "build_graph",
    "find_path",
    "host_path",
    "list_profiles",
    "load_profile",
    "lowest_grade",
    "transfer_path",
    "write_back_path",
]
