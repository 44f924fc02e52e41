"""The `trainop` command line: run, render, cluster, catalog, explain, simulate."""
