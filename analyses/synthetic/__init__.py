"""Models built by construction: tiny random checkpoints, the family matrix, the planted-heads
checkpoint and the self-test that recovers its heads."""
