"""Importers turning third-party co-location measurements into ``coloc/v1`` records."""
