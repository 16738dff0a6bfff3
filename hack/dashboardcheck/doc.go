// Package dashboardcheck holds the test that runs every PromQL query of
// Sluice's Grafana dashboard (charts/sluice/files/grafana-dashboard.json)
// on a real Prometheus engine (github.com/prometheus/prometheus's promql and
// TSDB) over the metrics that real limiter and operator processes exposed
// (written by the controllers test TestDashboardExpositions), and fails on a
// query that returns no series. It is a Go module of its own because
// Prometheus needs another k8s.io than the operator's. make test-dashboard
// runs both halves.
package dashboardcheck
