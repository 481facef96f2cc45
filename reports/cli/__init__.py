"""The ``headlens`` command line: :mod:`headlens.reports.cli.main` is the click group, one thin module per command group."""
