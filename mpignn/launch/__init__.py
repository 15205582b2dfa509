"""Starting a rank (`bootstrap` -> `Runtime`), the device helpers every layer above shares, and malloc's policy.

Layer 3 (launch): imports the leaves, config and mpi; never data, sampling or anything above, never
torch-geometric. Importing the package imports nothing; its modules import torch where they need it.
"""
