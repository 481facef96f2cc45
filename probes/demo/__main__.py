"""``python -m probes.demo``: the demo model's recipe and model card (see :mod:`probes.demo.cli`)."""

from probes.demo.cli import main

main()
