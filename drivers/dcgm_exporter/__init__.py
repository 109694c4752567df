"""GPU nodes' NVIDIA dcgm-exporter, scraped over HTTP. See README.md.

Import ``drivers.dcgm_exporter.driver`` for the driver; this package itself stays light so that
loading the configuration does not import the metrics parser.
"""
