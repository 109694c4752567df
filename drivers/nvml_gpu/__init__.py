"""The host's NVIDIA GPUs through NVML (nvidia-ml-py). See README.md."""

from drivers.nvml_gpu.driver import NvmlGpuDriver

__all__ = ["NvmlGpuDriver"]
