"""The SLA report: an SLO's figures over a range (:mod:`.figures`), drawn
(:mod:`.charts`) into one self-contained HTML file (:mod:`.page`); docs/report.md."""

from warehouse.exporters.report.figures import SloFigures, gather
from warehouse.exporters.report.page import render

__all__ = ["SloFigures", "gather", "render"]
