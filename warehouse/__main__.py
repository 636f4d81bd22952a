"""``python -m warehouse`` runs the ``llmwh`` command line."""

from warehouse.cli import main

main()
