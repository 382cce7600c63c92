"""An agent's own module that gates tools it did not write (``approvals.calls.gate``)."""

from __future__ import annotations

from approvals import gate
from tests.agents import vendor

archive_bucket = gate(vendor.archive_bucket, summary="Archive {bucket}", editable=["days"])
