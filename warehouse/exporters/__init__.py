"""Exporters: SLA figures for Prometheus (:mod:`.sla`); Grafana files live in exporters/."""
