"""The dashboard: a live web page over the log (or an archived run); see docs/dashboard.md."""
