"""The baselines TTT-Embed is compared with: pseudo-relevance feedback and Rocchio
(:mod:`.prf`), Qdrant's relevance-feedback formula (:mod:`.qdrant_rf`)."""
