"""The trees the agent may patch, as git repos on the host: porter's safe git, the baseline a tree gets when it
is unpacked from the image, the tracked repo of a run (pending diff, commits, reverts) and the
model overlay (the checkpoint's small files as a tree, weights linked read-only).
"""
