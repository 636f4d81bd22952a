"""Names of the SLA exporter's metrics that something outside it reads: the alerting
rules (:mod:`warehouse.exporters.alerts`) take them from here, as the exporter does."""

from __future__ import annotations

__all__ = ["BUDGET_REMAINING", "BURN_RATE", "EXPORTER_UP"]

BURN_RATE = "llmwh_slo_burn_rate"
BUDGET_REMAINING = "llmwh_slo_error_budget_remaining"
EXPORTER_UP = "llmwh_exporter_up"
