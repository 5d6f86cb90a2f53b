"""Data synthesis for the verifier and checklist papers (SEVA teacher annotations and probes)."""
