"""What every layer shares: errors, the backend registry, artifact I/O, progress, paths
and devices. Nothing here imports another tttembed package."""
