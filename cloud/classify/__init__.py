"""The cloud's second opinion: the batcher, the classifier, its versions and the verdict map."""
