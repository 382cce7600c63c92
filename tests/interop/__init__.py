"""The product checked by tools nobody here wrote: Node's ``jose`` and ``canonicalize`` on
receipts, Node's ``standardwebhooks`` on webhook deliveries, ``promtool`` on ``/metrics``."""
