"""Group layers: failure detection and membership."""
