from mpignn.partition.cli import cli

cli()
