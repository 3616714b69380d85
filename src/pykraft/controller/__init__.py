"""The quorum controller: decides metadata changes as records (see quorum_controller.py)."""
