"""Exporters: SLA figures for Prometheus (:mod:`.sla`), and the files of the top-level
exporters/ (Grafana dashboards and provisioning, Prometheus rules: :mod:`.shipped`)."""
