"""Schema Registry values on the Spark side: the settings of a key or value schema, the registry
client (driver only) and what the driver resolves once per run and ships to the tasks."""
