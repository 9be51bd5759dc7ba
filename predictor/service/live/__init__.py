"""The service's live view of its devices: what runs and waits where, memory, model loads, links."""
