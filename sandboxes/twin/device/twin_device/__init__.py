"""The twin's simulated device: what the GPUs of the node do, served to the engine over a unix socket.

Runs on the host (never inside the sandbox image), so an agent working in the sandbox cannot read how the
hardware behaves: it can only measure it, as on a real node. Stdlib only.
"""
