"""GPU nodes' NVIDIA dcgm-exporter, scraped over HTTP. See README.md. Import ``.driver``: this package
itself stays light, so loading the configuration does not import the metrics parser.
"""
