"""Scripts that regenerate every table and figure in the README from data."""
