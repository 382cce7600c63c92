"""The Slack side: a Bolt app whose listeners call into ``approvals``."""
