"""Device drivers: one sub-package per device family, each mapping its device's values onto the
canonical signal names of ``shared/spec/trace-format.md``, so the engine never knows a vendor.
"""
