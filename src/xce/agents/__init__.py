"""Claim agents: the provisioner daemon (shared-scope claims) and the agent loop it shares with workers.

- ``agent``        the claim-agent loop: lease, work, intent, provider, fenced report
- ``provisioner``  ``xce provisioner``: its config (providers and their private configs) and main
"""
