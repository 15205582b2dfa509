"""`python -m mpignn.predict`: see `mpignn.predict.cli`."""
from mpignn.predict.cli import cli

cli()
