"""What the maintenance jobs (retention, rebuild-index, compaction-audit) share."""
