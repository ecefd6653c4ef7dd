"""Reward scorers: the Scorer protocol, backends chosen by spec, and the paid-pair ledger."""
