"""The worker: wake, claim, execute, report; plus leases and the sweeper."""
