"""The ingest job: source rows -> Kafka records -> partition directories."""
