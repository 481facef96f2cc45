"""runs: the report builder, the Ray sweep and the demo model card; call the api, render what it returns."""
