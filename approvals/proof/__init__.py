"""What proves a decision to others: signed receipts and their keys, API tokens, the audit
trail's hash chain, and signed webhooks."""
