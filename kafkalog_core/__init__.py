"""Kafka's storage layer in Python: record batches, indexes, segments, logs (no Spark here)."""

from pkgutil import extend_path

# The compiled C loops may live apart from the Python code: Spark executors get this package as
# --py-files (a zip cannot load a .so) and `_native` from the packed environment's
# site-packages/kafkalog_core/ (jobs/spark/packed_env.py).
__path__ = extend_path(__path__, __name__)
