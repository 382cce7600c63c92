"""Deciding an approval: by a person (``review``), by a rule (``policy``, ``automatic``) or by a
grant (``grants``); what makes arguments acceptable (``ijson``, ``schemas``); the deadlines
that remind, escalate and expire (``deadlines``, ``reminders``); and ``recovery``, which
finishes whatever a dead process left half done."""
