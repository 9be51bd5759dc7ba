"""Pipeline planning: a DAG of batches, one end-to-end deadline, a device and a budget per stage."""
