"""Running approvals: the archive and its migrations, retention, lookups across Redis and the
archive, metrics, logs, and ``approvals doctor``."""
