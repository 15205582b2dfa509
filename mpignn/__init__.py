"""mpignn: MPI-native distributed GNN training. Importing the package initialises nothing (no MPI, no torch)."""
from mpignn.errors import ConfigError, LaunchError, MpignnError, PartitionFormatError

__version__ = "0.1.0"
__all__ = ["__version__", "MpignnError", "ConfigError", "LaunchError", "PartitionFormatError"]
