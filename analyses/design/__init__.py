"""Design questions answered by measurement: KV-cache arithmetic, grouped-query what-ifs, projection knockouts."""
