"""The host's NVIDIA GPUs through NVML (nvidia-ml-py). See README.md.

Import the modules (``.driver`` for the driver, ``.config`` for the ``[nvml]`` section): this package
itself stays light, so loading the configuration does not import pynvml.
"""
