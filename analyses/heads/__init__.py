"""What each head does: detectors (a registry), the census over stimuli, classification into roles,
and the check that patterns follow from Q and K."""
