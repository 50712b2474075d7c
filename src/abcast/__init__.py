"""abcast: group communication for Python."""
