"""Cross-camera identities (issue 42): the linker that joins tracks of different cameras into
one identity, and the index that answers search by example."""
