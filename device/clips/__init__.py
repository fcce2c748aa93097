"""Event clips: cut from the packet ring, spooled on disk, uploaded to the cloud."""
