"""What every layer shares: errors, the backend table (spec scheme -> factory,
backends.py), artifact I/O, progress, paths and devices. Nothing here imports another
tttembed package."""
