"""The cascade's filters: the motion gate, the cascade policy and the relevance gate."""
