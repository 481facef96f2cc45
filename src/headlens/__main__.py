"""``python -m headlens``: the same as the ``headlens`` command."""

from headlens.reports.cli.main import main

if __name__ == "__main__":
    main()
