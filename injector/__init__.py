"""The delay daemon: holds the packets of chosen links for a scheduled time (thesis §3.1.2)."""
