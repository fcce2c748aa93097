"""Stage 5, publish: results out on the PUB socket, crops chosen for the cloud."""
