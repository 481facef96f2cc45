"""Which heads matter: the ablation data and metrics, head masks, the single-head study, gradient attribution, layer-suffix replay and pruning."""
