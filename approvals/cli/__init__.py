"""The ``approvals`` command (``main``) and the generator of its documentation (``docs``)."""
