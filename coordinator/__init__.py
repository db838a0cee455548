"""linkgrad coordinator: web-log ingestion, spectral link-gradient estimation and the CLI."""
