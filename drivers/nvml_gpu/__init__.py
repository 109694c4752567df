"""The host's NVIDIA GPUs through NVML (nvidia-ml-py). See README.md. Import the modules (``.driver``,
``.config``): this package itself stays light, so loading the configuration does not import pynvml.
"""
