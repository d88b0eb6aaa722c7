"""Prometheus and Grafana for the service: the scrape config of `gx10 metrics config` and the
dashboard it writes beside it (docs/METRICS.md)."""
