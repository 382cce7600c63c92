"""The RQ side: jobs that post cards, resume decided approvals and publish results."""
