"""Where attention piles up and why: the sink census, secondary sinks, content probes and sink interventions."""
