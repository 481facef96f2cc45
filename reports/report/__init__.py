"""The full report: settings, stages and the build that joins them."""
