"""twin: a serving engine with sglang's interfaces (flags, OpenAI-compatible API, log format).

The device is reached through a socket (device.py). Entry point: `python3 -m twin.launch_server`.
"""

__version__ = "0.5.6.twin"
