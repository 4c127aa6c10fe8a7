"""twin: a small serving engine that behaves like sglang serving GLM-5.2 MXFP4 on MI355X, without a GPU.

Stdlib only (it runs inside porter-base, which has no pip packages). It runs on a simulated device reached
through a socket (device.py); numbers it produces are the twin's, never hardware measurements.
Entry point: `python3 -m twin.launch_server`.
"""

__version__ = "0.5.6.twin"
